//go:build !linux

package demo

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death
// signal: the demo still stops its children on every normal way out and on
// Ctrl-C.
func dieWithParent(cmd *exec.Cmd) {}
