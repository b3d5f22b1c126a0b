package tenuredproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel kill cmd's process if this process dies
// without cleaning up (SIGKILL), so no tenured or frozen child is left
// behind.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
