package node

import (
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/raftlog"
)

// syncedSnapshots is a FileSnapshotStore that also fsyncs each snapshot's
// own directory once the snapshot is in place. The store fsyncs state.bin,
// meta.json and the parent directory after the rename, but not the
// directory that names the two files: after a power loss a file system
// may keep the renamed directory and lose its entries, and the node,
// whose log raft compacts right after, would find no snapshot of the
// entries it dropped (the power-loss fault of tenure-verify found this).
//
// With rl set, it also saves the raft log's marks once a snapshot is in
// place: the log then reaches at least as far as the snapshot, and a log
// emptied later, with the snapshot left, is refused at the next start
// instead of the snapshot being taken for all the node had.
type syncedSnapshots struct {
	*raft.FileSnapshotStore
	dir     string         // the store's snapshots directory
	rl      *raftlog.Store // nil: no marks to save
	covered *atomic.Uint64 // nil, or the newest snapshot stored (see coveredLog)
}

func (s syncedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &syncedSink{SnapshotSink: sink, dir: s.dir, rl: s.rl, covered: s.covered, index: index}, nil
}

type syncedSink struct {
	raft.SnapshotSink
	dir     string
	rl      *raftlog.Store
	covered *atomic.Uint64
	index   uint64
}

// Close finishes the snapshot, then syncs its directory: raft compacts
// the log only after Close returns.
func (s *syncedSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	if err := syncDir(filepath.Join(s.dir, s.ID())); err != nil {
		return fmt.Errorf("node: sync snapshot %s: %w", s.ID(), err)
	}
	if s.covered != nil {
		noteCovered(s.covered, s.index)
	}
	if s.rl != nil {
		// A failure leaves the marks lower than they could be, never
		// higher; the log's own saves go on.
		_ = s.rl.SaveMarks()
	}
	return nil
}

var (
	_ raft.SnapshotStore = syncedSnapshots{}
	_ io.WriteCloser     = (*syncedSink)(nil)
)
