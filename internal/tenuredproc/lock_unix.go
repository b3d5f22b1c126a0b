//go:build unix

package tenuredproc

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive advisory lock on f without blocking.
func tryLock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
