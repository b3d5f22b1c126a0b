package node

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// raft's log cache passes the store's error on as text; a leader that
// could not write its log because its disk is full says so, as a request
// that was not applied.
func TestMapRaftErrorCannotWrite(t *testing.T) {
	asCache := func(err error) error { return fmt.Errorf("unable to store logs within log store, err: %q", err) }
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EROFS, syscall.EACCES} {
		err := mapRaftError(asCache(&os.PathError{Op: "open", Path: "raft-log/00000000000000000021.log.tmp", Err: errno}))
		if !errors.Is(err, ErrCannotWrite) {
			t.Errorf("%v: mapped to %v, want ErrCannotWrite", errno, err)
		}
	}
	for _, err := range []error{asCache(errors.New("raftlog: entry 7 does not follow the log")), raft.ErrNotLeader, errors.New("no space left on device")} {
		if errors.Is(mapRaftError(err), ErrCannotWrite) {
			t.Errorf("%v mapped to ErrCannotWrite", err)
		}
	}
}
