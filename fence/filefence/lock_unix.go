//go:build unix

package filefence

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
)

// lock takes the directory's lock (flock on LockFile, through a file
// description of its own, so that it excludes other Dirs of this process
// too) and returns its release. It gives up when ctx ends; the lock, if it
// comes later, is then released at once.
func (d *Dir) lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(d.path, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, d.wrap("open the lock file", err)
	}
	// Most of the time the lock is free: take it without a goroutine.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		return func() { f.Close() }, nil
	}
	done := make(chan error, 1)
	go func() { done <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, d.wrap("lock", err)
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		go func() { <-done; f.Close() }()
		return nil, context.Cause(ctx)
	}
}
