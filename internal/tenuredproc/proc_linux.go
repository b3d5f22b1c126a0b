package tenuredproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// DieWithParent makes the kernel kill cmd's process if this process dies
// without cleaning up (SIGKILL), so no tenured or frozen child is left
// behind. Start cmd with StartCmd.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// StartCmd starts cmd. Linux sends the parent-death signal when the
// thread that started the child exits, not the process (go.dev/issue/27505),
// and Go ends a thread whose goroutine exits while locked to it: so a
// command with a parent-death signal is started from one thread that is
// locked for the life of this process and never ends.
func StartCmd(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil || cmd.SysProcAttr.Pdeathsig == 0 {
		return cmd.Start()
	}
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: see above
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}
