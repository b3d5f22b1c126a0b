//go:build !linux

package tenuredproc

import "os/exec"

// DieWithParent does nothing where the kernel offers no parent-death
// signal: callers still stop their children on every normal way out.
func DieWithParent(cmd *exec.Cmd) {}

// StartCmd starts cmd.
func StartCmd(cmd *exec.Cmd) error { return cmd.Start() }
