package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ErrLost is returned by Open, and by LogMarks.Check, for a log that holds
// less than its marks say it held: entries it had synced are gone (files
// deleted, a directory emptied or replaced, a segment cut short).
var ErrLost = errors.New("raftlog: the log lost entries it had synced")

// LogMarks say how far a log reached. They are kept outside the log's
// directory (Options.Marks), so that a log whose files were deleted, or
// whose directory was emptied, is told apart from one that never held
// more: a raft member that forgot entries it had acknowledged could hand
// out a fencing token again.
//
// The store saves its marks after a change that lowers them (a deletion)
// and before the change itself, and otherwise every Options.MarkInterval
// while entries are appended, at Close, and whenever its owner calls
// SaveMarks (a raft node does after each snapshot). Last therefore never
// exceeds what is synced, and lags it by at most about MarkInterval.
type LogMarks struct {
	// First is where the log must begin, at the latest: entries before
	// it may have been deleted, entries from it on may not. 0 promises
	// nothing.
	First uint64
	// Last is an index up to which every entry was synced: the log must
	// reach it. 0 promises nothing.
	Last uint64
}

// DefaultMarkInterval is how often a store saves its marks while entries
// are appended, unless Options.MarkInterval says otherwise.
const DefaultMarkInterval = 250 * time.Millisecond

// Marks keeps a log's marks durably.
type Marks interface {
	// LoadMarks returns the marks saved last, or zero marks if none were.
	LoadMarks() (LogMarks, error)
	// SaveMarks saves m; they are durable once it returns.
	SaveMarks(m LogMarks) error
}

// Check returns an error matching ErrLost if a log holding the entries
// first through last (0, 0: none) falls short of m.
func (m LogMarks) Check(first, last uint64) error {
	switch {
	case m.Last != 0 && last == 0:
		return fmt.Errorf("%w: it is empty, but it held entries up to index %d, synced", ErrLost, m.Last)
	case m.Last != 0 && last < m.Last:
		return fmt.Errorf("%w: it ends at index %d, but it held entries up to index %d, synced", ErrLost, last, m.Last)
	case m.First != 0 && last != 0 && first > m.First:
		return fmt.Errorf("%w: it begins at index %d, but it held the entries from index %d on", ErrLost, first, m.First)
	}
	return nil
}

// Bytes encodes m in 16 bytes.
func (m LogMarks) Bytes() []byte {
	b := binary.BigEndian.AppendUint64(nil, m.First)
	return binary.BigEndian.AppendUint64(b, m.Last)
}

// ParseMarks decodes what Bytes encoded; no bytes are zero marks.
func ParseMarks(b []byte) (LogMarks, error) {
	switch len(b) {
	case 0:
		return LogMarks{}, nil
	case 16:
		return LogMarks{First: binary.BigEndian.Uint64(b), Last: binary.BigEndian.Uint64(b[8:])}, nil
	}
	return LogMarks{}, fmt.Errorf("raftlog: marks of %d bytes, want 16", len(b))
}

// checkMarks loads the saved marks and checks the log against them.
func (st *Store) checkMarks() error {
	if st.opts.Marks == nil {
		return nil
	}
	m, err := st.opts.Marks.LoadMarks()
	if err != nil {
		return fmt.Errorf("raftlog: load the log's marks: %w", err)
	}
	st.saved = m
	first, last := uint64(0), uint64(0)
	if tail := st.tail(); tail != nil {
		first, last = st.firstIndex(), tail.last()
	}
	if err := m.Check(first, last); err != nil {
		return fmt.Errorf("%s: %w", st.dir, err)
	}
	return nil
}

// startMarks saves the marks of the log as Open found it (all of it
// synced) and starts the goroutine that saves them as the log grows.
func (st *Store) startMarks() error {
	if st.opts.Marks == nil {
		return nil
	}
	if err := st.saveMarks(); err != nil {
		return err
	}
	every := st.opts.MarkInterval
	if every <= 0 {
		every = DefaultMarkInterval
	}
	st.markStop, st.markDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(st.markDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-st.markStop:
				return
			case <-t.C:
			}
			// A failure is retried at the next tick; until then the
			// saved marks are lower than they could be, never higher.
			_ = st.saveMarks()
		}
	}()
	return nil
}

// stopMarks stops the goroutine startMarks started.
func (st *Store) stopMarks() {
	if st.markStop != nil {
		close(st.markStop)
		<-st.markDone
		st.markStop = nil
	}
}

// currentMarksLocked returns the marks of the log as it is: its first
// entry and its last synced one. st.mu is held.
func (st *Store) currentMarksLocked() LogMarks {
	tail := st.tail()
	if tail == nil {
		return LogMarks{}
	}
	last := tail.last()
	if st.pendFrom != 0 {
		last = st.pendFrom - 1
	}
	if last < st.firstIndex() {
		return LogMarks{First: st.firstIndex()}
	}
	return LogMarks{First: st.firstIndex(), Last: last}
}

// SaveMarks saves the marks of the log as it is now (see LogMarks); the
// store also does so by itself every MarkInterval. It does nothing without
// Options.Marks.
func (st *Store) SaveMarks() error {
	if st.opts.Marks == nil {
		return nil
	}
	return st.saveMarks()
}

// saveMarks saves the marks of the log as it is now, unless a deletion
// saved its own meanwhile. It takes st.mu only to read them, never while
// it saves: appends do not wait for it.
func (st *Store) saveMarks() error {
	st.mu.RLock()
	if st.closed {
		st.mu.RUnlock()
		return nil
	}
	gen := st.markGen.Load()
	m := st.currentMarksLocked()
	st.mu.RUnlock()
	st.markMu.Lock()
	defer st.markMu.Unlock()
	if st.markGen.Load() != gen || m == st.saved {
		return nil
	}
	if err := st.opts.Marks.SaveMarks(m); err != nil {
		return fmt.Errorf("raftlog: save the log's marks: %w", err)
	}
	st.saved = m
	return nil
}

// setMarksLocked saves m before a change that lowers the marks; st.mu is
// held. A saveMarks that read the marks before it does not save them
// after it.
func (st *Store) setMarksLocked(m LogMarks) error {
	if st.opts.Marks == nil {
		return nil
	}
	st.markGen.Add(1)
	st.markMu.Lock()
	defer st.markMu.Unlock()
	if m == st.saved {
		return nil
	}
	if err := st.opts.Marks.SaveMarks(m); err != nil {
		return fmt.Errorf("raftlog: save the log's marks: %w", err)
	}
	st.saved = m
	return nil
}

// mkdirSynced creates dir if it does not exist, and then syncs its parent,
// so that the new directory's entry survives a power cut.
func mkdirSynced(dir string, noSync bool) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	if noSync {
		return nil
	}
	parent, err := os.Open(filepath.Dir(filepath.Clean(dir)))
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	defer parent.Close()
	if err := parent.Sync(); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", parent.Name(), err)
	}
	return nil
}
