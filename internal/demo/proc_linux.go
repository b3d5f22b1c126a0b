package demo

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process if the demo dies
// without cleaning up (SIGKILL), so no tenured or frozen worker is left
// behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
