//go:build !unix

package tenuredproc

import "os"

// tryLock cannot lock across processes here; the bind check alone guards
// the port.
func tryLock(f *os.File) bool { return true }
