package node

import (
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/raftlog"
)

// raft deletes everything its log holds after it installed a snapshot; a
// deletion of a prefix never reaches past the newest snapshot stored, so
// entries that arrived after the snapshot stay.
func TestCoveredLogKeepsEntriesNoSnapshotCovers(t *testing.T) {
	st, err := raftlog.Open(t.TempDir(), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs []*raft.Log
	for i := uint64(1); i <= 30; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := st.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	var covered atomic.Uint64
	c := coveredLog{Store: st, covered: &covered}
	span := func() (uint64, uint64) {
		f, _ := st.FirstIndex()
		l, _ := st.LastIndex()
		return f, l
	}
	if err := c.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	if f, l := span(); f != 1 || l != 30 {
		t.Fatalf("with no snapshot, deleting 1-30 left %d-%d; want all of it", f, l)
	}
	noteCovered(&covered, 20)
	noteCovered(&covered, 12)                    // an older snapshot does not lower it
	if err := c.DeleteRange(1, 30); err != nil { // removeOldLogs
		t.Fatal(err)
	}
	if f, l := span(); f != 21 || l != 30 {
		t.Fatalf("after deleting 1-30 with a snapshot at 20: log %d-%d, want 21-30", f, l)
	}
	if err := c.DeleteRange(26, 30); err != nil { // a conflicting suffix
		t.Fatal(err)
	}
	if f, l := span(); f != 21 || l != 25 {
		t.Fatalf("after cutting 26-30: log %d-%d, want 21-25", f, l)
	}
}
