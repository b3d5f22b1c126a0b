//go:build unix

package demo

import (
	"os"
	"syscall"
)

// freezeProcess stops p the way a debugger, a VM stall or a long GC pause
// would: it runs no code until resumed.
func freezeProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resumeProcess continues a process stopped by freezeProcess.
func resumeProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
