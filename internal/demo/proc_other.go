//go:build !unix

package demo

import (
	"errors"
	"os"
)

var errNoStop = errors.New("demo: freezing a process (SIGSTOP) needs a Unix system")

func freezeProcess(p *os.Process) error { return errNoStop }

func resumeProcess(p *os.Process) error { return errNoStop }
