package node

import (
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/raftlog"
)

// coveredLog keeps raft from deleting entries that no snapshot covers.
//
// After a follower installs a snapshot, hashicorp/raft (v1.7.3, with a
// log store that says it is monotonic) deletes everything its log store
// holds, from the first entry to the last (removeOldLogs), assuming the
// log ends at the snapshot. When the same snapshot is installed twice in
// a row (the leader sends it again) and entries after it arrived in
// between, that deletes those entries too, while raft still counts them
// as in its log: it then fails to apply them ("log not found") and the
// node panics, leaving a data directory whose log begins after its
// newest snapshot. tenure-verify's run with every fault found it.
//
// A deletion of a prefix (raft's compaction and removeOldLogs; both
// start at the first entry) is therefore cut back to the newest snapshot
// stored. Deletions of a suffix (a conflict with the leader's log) start
// after the first entry and pass unchanged.
type coveredLog struct {
	*raftlog.Store
	covered *atomic.Uint64 // index of the newest snapshot stored
}

var _ raft.LogStore = coveredLog{}

func (c coveredLog) DeleteRange(min, max uint64) error {
	if first, err := c.Store.FirstIndex(); err == nil && min <= first {
		if s := c.covered.Load(); max > s {
			if s < min {
				return nil
			}
			max = s
		}
	}
	return c.Store.DeleteRange(min, max)
}

// noteCovered records that a snapshot up to index is stored.
func noteCovered(covered *atomic.Uint64, index uint64) {
	for {
		cur := covered.Load()
		if index <= cur || covered.CompareAndSwap(cur, index) {
			return
		}
	}
}
