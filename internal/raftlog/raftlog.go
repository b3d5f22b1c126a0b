// Package raftlog is a raft.LogStore that appends each batch of entries
// to preallocated segment files with a single fdatasync, like etcd's
// write-ahead log.
//
// A store is a directory of segments named by the index of their first
// entry (%020d.log). Each segment is preallocated to its size and filled
// with records:
//
//	length  uint32   bytes of the payload
//	crc     uint32   CRC-32C of the payload
//	payload          index, term, type, appended-at, data, extensions
//
// A zero length marks the end of the written part. Opening a store scans
// every segment: records must carry consecutive indexes within and across
// segments. In the last segment, the first record that is torn (a short
// or corrupt write cut off by a crash, never acknowledged) ends the log,
// and the rest of the segment is zeroed so that nothing written before
// can ever be read back as a record; anywhere else a bad record is
// corruption, and Open fails naming the file.
//
// raft deletes a prefix of the log after a snapshot and a suffix when a
// follower's log conflicts with its leader's. A prefix is deleted a whole
// segment at a time (a segment partly covered stays, and its older
// entries stay readable: they are committed entries, identical on every
// member). A suffix is cut exactly: the segment holding its first entry
// is zeroed from that entry on, and later segments are removed.
//
// # Deferred syncs
//
// With Options.DeferSync, an append that DeferSync allows returns once
// its records are written, and a goroutine of the store syncs them. A
// raft leader uses it to write its own log while the followers write
// theirs (section 10.2.1 of the raft thesis): an entry then costs one
// fdatasync of latency instead of two in a row. Synced reports how far
// the log is on disk, WaitSynced waits for it, and Sync syncs everything
// at once. Whoever defers syncs must not act on an entry before it is
// synced (see package node). Every other change (an append that is not
// deferred, a deletion, Close) first syncs whatever is pending.
package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// DefaultSegmentSize is the size a segment is preallocated to.
const DefaultSegmentSize = 64 << 20

const (
	headerLen = 8
	// fixedPayload is index, term, type, appended-at, and the lengths
	// of data and extensions.
	fixedPayload = 8 + 8 + 1 + 8 + 4 + 4
	suffix       = ".log"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned by Open for a segment that does not hold a valid
// log, and by GetLog for a record that fails its checksum.
var ErrCorrupt = errors.New("raftlog: corrupt log")

// Options configures a Store.
type Options struct {
	// SegmentSize is the size segments are preallocated to; a record
	// larger than it gets a segment of its own size. Default 64 MiB.
	SegmentSize int64
	// NoSync skips fdatasync (tests only: nothing survives a crash).
	NoSync bool
	// DeferSync, if set, is asked before each append whether its
	// entries may be synced in the background (see the package comment).
	// It is called with the store's lock held, in the same critical
	// section as the append: a Sync that begins after DeferSync answered
	// finds the append done and syncs it. DeferSync must not call the
	// store.
	DeferSync func(logs []*raft.Log) bool
	// Marks, if set, keeps the log's marks (see LogMarks) somewhere the
	// log's own directory is not: Open refuses a log that falls short of
	// them, and the store keeps them up to date.
	Marks Marks
	// MarkInterval is how often the store saves its marks while entries
	// are appended. Default DefaultMarkInterval.
	MarkInterval time.Duration
	// BeforeBackgroundSync, if set, is called by the syncer before each
	// sync of deferred appends (tests hold syncs back with it).
	BeforeBackgroundSync func()
}

// Store is a raft.LogStore on segment files. It is safe for concurrent
// use.
type Store struct {
	dir  string
	opts Options

	mu   sync.RWMutex
	segs []*segment // in index order; the last one is written to
	// first is the index of the first entry after a prefix deletion
	// that did not remove whole segments (0: the first segment's first
	// entry). It is kept in the file firstIndexFile.
	first uint64

	// Deferred syncs. Entries from pendFrom to the end of the log are
	// written but not synced (pendFrom 0: none are); only deferred
	// appends leave entries pending, and whatever else changes the log
	// syncs them first. dirty are the segments written to since the
	// last sync. syncing is set while the syncer syncs without holding
	// mu: nothing closes or cuts a file meanwhile. cond (on mu) is
	// broadcast when a sync ends. synced mirrors Synced for readers
	// without the lock. err is a failed sync: the store can no longer
	// tell what is on disk and refuses everything.
	pendFrom   uint64
	dirty      []*segment
	syncing    bool
	closed     bool
	err        error
	cond       *sync.Cond
	kick       chan struct{} // wakes the syncer; nil until the first deferred append
	syncerDone chan struct{}
	synced     atomic.Uint64

	// Marks (see LogMarks). saved are the marks saved last, guarded by
	// markMu, which is held while they are saved; a goroutine that holds
	// markMu never waits for mu. markGen counts the deletions that saved
	// marks of their own.
	markMu   sync.Mutex
	saved    LogMarks
	markGen  atomic.Uint64
	markStop chan struct{}
	markDone chan struct{}
}

// firstIndexFile records where the log begins when a prefix deletion cut
// into a segment.
const firstIndexFile = "first-index"

type segment struct {
	path    string
	first   uint64  // index of the first record; set before any is written
	offsets []int64 // offsets[i] is where the record of first+i starts
	end     int64   // where the next record goes
	size    int64   // preallocated size
	f       *os.File
	torn    bool // scanSegment found a torn record at end
}

func (s *segment) last() uint64 { return s.first + uint64(len(s.offsets)) - 1 }
func (s *segment) empty() bool  { return len(s.offsets) == 0 }

var _ raft.LogStore = (*Store)(nil)

// Open opens the store in dir, creating dir if needed, and recovers it
// as described in the package comment.
func Open(dir string, opts Options) (*Store, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if err := mkdirSynced(dir, opts.NoSync); err != nil {
		return nil, err
	}
	st := &Store{dir: dir, opts: opts}
	st.cond = sync.NewCond(&st.mu)
	st.synced.Store(noneUnsynced)
	names, err := segmentNames(dir)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		seg, err := st.openSegment(name, i == len(names)-1)
		if err != nil {
			st.Close()
			return nil, err
		}
		if n := len(st.segs); n > 0 {
			prev := st.segs[n-1]
			if prev.empty() || seg.first != prev.last()+1 {
				st.Close()
				return nil, fmt.Errorf("%w: %s starts at index %d, but %s ends at %d", ErrCorrupt,
					seg.path, seg.first, prev.path, prev.last())
			}
		}
		st.segs = append(st.segs, seg)
	}
	// An empty last segment (created, then the process stopped before
	// its first record was synced) is dropped; the next append creates
	// the segment it needs.
	if n := len(st.segs); n > 0 && st.segs[n-1].empty() {
		seg := st.segs[n-1]
		st.segs = st.segs[:n-1]
		seg.f.Close()
		if err := os.Remove(seg.path); err != nil {
			st.Close()
			return nil, fmt.Errorf("raftlog: %w", err)
		}
		if err := st.syncDir(); err != nil {
			st.Close()
			return nil, err
		}
	}
	if err := st.loadFirst(); err != nil {
		st.Close()
		return nil, err
	}
	// A process killed after a deferred append leaves its records in the
	// page cache, where they read back but may not survive the machine:
	// sync them before they count as synced. An append can cross into a
	// new segment, and a crash can come between any two syncs, so every
	// segment may hold such records, not only the last.
	if !opts.NoSync {
		if err := syncFiles(st.segs); err != nil {
			st.Close()
			return nil, err
		}
	}
	if err := st.checkMarks(); err != nil {
		st.Close()
		return nil, err
	}
	if err := st.startMarks(); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// noneUnsynced is what Synced returns when every entry is synced.
const noneUnsynced = ^uint64(0)

// Synced returns the index up to which every entry is synced: the entry
// before the first deferred one not synced yet, or the largest uint64
// when none is pending.
func (st *Store) Synced() uint64 { return st.synced.Load() }

// WaitSynced waits until every entry up to index is synced, and returns
// the error of a failed sync (the entry may then never be synced).
func (st *Store) WaitSynced(index uint64) error {
	if index <= st.synced.Load() {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for st.err == nil && st.pendFrom != 0 && st.pendFrom <= index {
		st.cond.Wait()
	}
	return st.err
}

// Sync syncs every entry written, waiting for the syncer if it is busy.
func (st *Store) Sync() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.settleLocked()
}

// setSyncedLocked publishes the pending range to Synced; st.mu is held.
func (st *Store) setSyncedLocked() {
	if st.pendFrom == 0 {
		st.synced.Store(noneUnsynced)
	} else {
		st.synced.Store(st.pendFrom - 1)
	}
}

// markDirtyLocked records that seg was written without a sync.
func (st *Store) markDirtyLocked(seg *segment) {
	if n := len(st.dirty); n == 0 || st.dirty[n-1] != seg {
		st.dirty = append(st.dirty, seg)
	}
}

// fdatasync syncs a file's data (tests watch it).
var fdatasync = func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// sync syncs the segment's data.
func (s *segment) sync() error {
	if err := fdatasync(s.f); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", s.path, err)
	}
	return nil
}

// syncFiles syncs the segments.
func syncFiles(segs []*segment) error {
	for _, seg := range segs {
		if err := seg.sync(); err != nil {
			return err
		}
	}
	return nil
}

// settleLocked waits for the syncer and then syncs whatever is still
// pending, so that every entry written is synced and no file is in use
// outside mu. st.mu is held.
func (st *Store) settleLocked() error {
	for st.syncing {
		st.cond.Wait()
	}
	if st.err != nil {
		return st.err
	}
	if st.pendFrom == 0 {
		return nil
	}
	if err := syncFiles(st.dirty); err != nil {
		st.err = err
	} else {
		st.dirty, st.pendFrom = nil, 0
		st.setSyncedLocked()
	}
	st.cond.Broadcast()
	return st.err
}

// syncer syncs deferred appends, each time everything written so far,
// until Close closes kick.
func (st *Store) syncer() {
	defer close(st.syncerDone)
	for range st.kick {
		st.mu.Lock()
		if st.pendFrom == 0 || st.err != nil {
			st.mu.Unlock()
			continue
		}
		dirty, target := st.dirty, st.tail().last()
		st.dirty = nil
		st.syncing = true
		st.mu.Unlock()
		if st.opts.BeforeBackgroundSync != nil {
			st.opts.BeforeBackgroundSync()
		}
		err := syncFiles(dirty)
		st.mu.Lock()
		st.syncing = false
		switch {
		case err != nil:
			st.err = err
		case st.tail().last() <= target:
			st.pendFrom = 0
		default:
			// Appended to while it synced: the rest waits for the
			// next round, which the append's kick asked for.
			st.pendFrom = target + 1
		}
		st.setSyncedLocked()
		st.cond.Broadcast()
		st.mu.Unlock()
	}
}

// loadFirst reads firstIndexFile, if there is one.
func (st *Store) loadFirst() error {
	first, err := readFirst(st.dir)
	if err != nil || first == 0 {
		return err
	}
	if len(st.segs) == 0 || first < st.segs[0].first || first > st.tail().last() {
		last := uint64(0)
		if len(st.segs) > 0 {
			last = st.tail().last()
		}
		return fmt.Errorf("%w: %s says the log begins at %d, but the segments hold up to %d", ErrCorrupt,
			filepath.Join(st.dir, firstIndexFile), first, last)
	}
	st.first = first
	return nil
}

func readFirst(dir string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(dir, firstIndexFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raftlog: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, filepath.Join(dir, firstIndexFile), err)
	}
	return v, nil
}

// firstIndex returns the index of the first entry, 0 if the log is empty.
func (st *Store) firstIndex() uint64 {
	if len(st.segs) == 0 {
		return 0
	}
	return max(st.first, st.segs[0].first)
}

// setFirst records that the log begins at first (0: at its first
// segment's first entry).
func (st *Store) setFirst(first uint64) error {
	path := filepath.Join(st.dir, firstIndexFile)
	if first == 0 {
		if err := removeFile(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("raftlog: %w", err)
		}
		st.first = 0
		return st.syncDir()
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(first, 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	if !st.opts.NoSync {
		f, err := os.Open(tmp)
		if err != nil {
			return fmt.Errorf("raftlog: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("raftlog: sync %s: %w", tmp, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	st.first = first
	return st.syncDir()
}

func segmentNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // zero-padded: lexical order is index order
	return names, nil
}

func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, suffix) }

// openSegment reads the segment name and its records. In the last
// segment a torn record ends the log and the rest is zeroed.
func (st *Store) openSegment(name string, last bool) (*segment, error) {
	seg, err := st.scanSegment(name, last)
	if err != nil {
		return nil, err
	}
	if seg.torn {
		if err := seg.zeroFrom(seg.end, st.opts.NoSync); err != nil {
			seg.f.Close()
			return nil, err
		}
		seg.torn = false
	}
	return seg, nil
}

// scanSegment reads the segment name and its records without changing
// it. In the last segment a torn record ends the log (torn is set); in
// any other it is corruption. Only openSegment keeps the file open.
func (st *Store) scanSegment(name string, last bool) (*segment, error) {
	var first uint64
	if _, err := fmt.Sscanf(name, "%020d"+suffix, &first); err != nil || first == 0 {
		return nil, fmt.Errorf("%w: unexpected file name %s", ErrCorrupt, filepath.Join(st.dir, name))
	}
	path := filepath.Join(st.dir, name)
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	if fi.Size() < headerLen {
		f.Close()
		return nil, fmt.Errorf("%w: %s is cut short (%d bytes)", ErrCorrupt, path, fi.Size())
	}
	seg := &segment{path: path, first: first, size: fi.Size(), f: f}
	// Read record by record: the written part ends at the first zero
	// length, and the preallocated rest of the segment is never read.
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, fi.Size()), 256<<10)
	var b []byte
	off := int64(0)
	for {
		if b, err = readRecord(r, b[:0], fi.Size()-off); err != nil {
			f.Close()
			return nil, fmt.Errorf("raftlog: read %s: %w", path, err)
		}
		rec, n, err := parseRecord(b)
		if err == nil && n == 0 {
			break // the end of the written part
		}
		if err == nil && rec.Index != seg.first+uint64(len(seg.offsets)) {
			err = fmt.Errorf("record holds index %d, want %d", rec.Index, seg.first+uint64(len(seg.offsets)))
		}
		if err != nil {
			if !last {
				f.Close()
				return nil, fmt.Errorf("%w: %s at offset %d: %v", ErrCorrupt, path, off, err)
			}
			// A torn write at the end of the log: it was never
			// acknowledged.
			seg.torn = true
			break
		}
		seg.offsets = append(seg.offsets, off)
		off += int64(n)
	}
	seg.end = off
	return seg, nil
}

// readRecord reads into buf, from r, what parseRecord needs to decode
// the record at r's position, rest bytes before the segment's end: the
// header, and as much of the payload as the header claims and the segment
// holds. It returns buf.
func readRecord(r io.Reader, buf []byte, rest int64) ([]byte, error) {
	h := int(min(rest, headerLen))
	buf = slices.Grow(buf, h)[:h]
	if _, err := io.ReadFull(r, buf); err != nil || h < headerLen {
		return buf, err
	}
	m := int(min(int64(binary.LittleEndian.Uint32(buf)), rest-headerLen))
	buf = slices.Grow(buf, m)[:headerLen+m]
	_, err := io.ReadFull(r, buf[headerLen:])
	return buf, err
}

// parseRecord decodes the record at the start of b. It returns n == 0 at
// the end of the written part (a zero length).
func parseRecord(b []byte) (rec raft.Log, n int, err error) {
	if len(b) < headerLen {
		if allZero(b) {
			return rec, 0, nil
		}
		return rec, 0, errors.New("short header")
	}
	length := binary.LittleEndian.Uint32(b)
	if length == 0 {
		if binary.LittleEndian.Uint32(b[4:]) != 0 {
			return rec, 0, errors.New("zero length with a checksum")
		}
		return rec, 0, nil
	}
	if int64(length) > int64(len(b)-headerLen) || length < fixedPayload {
		return rec, 0, fmt.Errorf("bad length %d", length)
	}
	payload := b[headerLen : headerLen+int(length)]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return rec, 0, errors.New("checksum mismatch")
	}
	rec, err = decodePayload(payload)
	return rec, headerLen + int(length), err
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func appendRecord(buf []byte, l *raft.Log) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, headerLen)...)
	buf = binary.LittleEndian.AppendUint64(buf, l.Index)
	buf = binary.LittleEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.LittleEndian.AppendUint64(buf, uint64(at))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	payload := buf[start+headerLen:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, crcTable))
	return buf
}

func decodePayload(p []byte) (raft.Log, error) {
	var l raft.Log
	l.Index = binary.LittleEndian.Uint64(p)
	l.Term = binary.LittleEndian.Uint64(p[8:])
	l.Type = raft.LogType(p[16])
	if at := int64(binary.LittleEndian.Uint64(p[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	p = p[25:]
	n := binary.LittleEndian.Uint32(p)
	p = p[4:]
	if uint64(n)+4 > uint64(len(p)) {
		return l, errors.New("data overruns the record")
	}
	if n > 0 {
		l.Data = slices.Clone(p[:n])
	}
	p = p[n:]
	m := binary.LittleEndian.Uint32(p)
	p = p[4:]
	if uint64(m) != uint64(len(p)) {
		return l, errors.New("extensions do not fill the record")
	}
	if m > 0 {
		l.Extensions = slices.Clone(p)
	}
	return l, nil
}

// zeroFrom makes the segment read as ending at off: everything from off
// to its size becomes zeros, and that is synced.
func (s *segment) zeroFrom(off int64, noSync bool) error {
	if err := s.f.Truncate(off); err != nil {
		return fmt.Errorf("raftlog: cut %s: %w", s.path, err)
	}
	if err := preallocate(s.f, s.size); err != nil {
		return fmt.Errorf("raftlog: extend %s: %w", s.path, err)
	}
	if noSync {
		return nil
	}
	return s.sync()
}

// removeFile removes a file of the store (tests make it fail).
var removeFile = os.Remove

// preallocateFile preallocates a new segment (tests make it fail).
var preallocateFile = preallocate

func preallocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return f.Truncate(size) // a sparse file reads as zeros too
	}
	return err
}

// FirstIndex returns the index of the first entry, or 0 if the log is
// empty.
func (st *Store) FirstIndex() (uint64, error) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.firstIndex(), nil
}

// LastIndex returns the index of the last entry, or 0 if the log is empty.
func (st *Store) LastIndex() (uint64, error) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if len(st.segs) == 0 {
		return 0, nil
	}
	return st.segs[len(st.segs)-1].last(), nil
}

// find returns the segment holding index, or nil.
func (st *Store) find(index uint64) *segment {
	i := sort.Search(len(st.segs), func(i int) bool { return st.segs[i].last() >= index })
	if i == len(st.segs) || st.segs[i].first > index || st.segs[i].empty() || index < st.first {
		return nil
	}
	return st.segs[i]
}

// GetLog reads the entry at index into out.
func (st *Store) GetLog(index uint64, out *raft.Log) error {
	st.mu.RLock()
	defer st.mu.RUnlock()
	seg := st.find(index)
	if seg == nil {
		return raft.ErrLogNotFound
	}
	i := index - seg.first
	start := seg.offsets[i]
	end := seg.end
	if int(i)+1 < len(seg.offsets) {
		end = seg.offsets[i+1]
	}
	buf := make([]byte, end-start)
	if _, err := seg.f.ReadAt(buf, start); err != nil {
		return fmt.Errorf("raftlog: read %s: %w", seg.path, err)
	}
	rec, _, err := parseRecord(buf)
	if err != nil {
		return fmt.Errorf("%w: %s at offset %d: %v", ErrCorrupt, seg.path, start, err)
	}
	if rec.Index != index {
		return fmt.Errorf("%w: %s at offset %d holds index %d, want %d", ErrCorrupt, seg.path, start, rec.Index, index)
	}
	*out = rec
	return nil
}

// IsMonotonic tells raft that the log holds no gaps, so that raft removes
// the old log after it installs a snapshot (raft.MonotonicLogStore).
func (st *Store) IsMonotonic() bool { return true }

// StoreLog appends one entry.
func (st *Store) StoreLog(l *raft.Log) error { return st.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends entries, which must follow the last one, and syncs
// them with one fdatasync (two if they cross into a new segment), or
// leaves that to the syncer if Options.DeferSync allows. Entries that
// start past the end of the log replace it: raft does that only once a
// snapshot covers everything before them.
func (st *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return errors.New("raftlog: store is closed")
	}
	if err := st.err; err != nil {
		return err
	}
	// Asked under mu, so that the answer and the append are one step for
	// Sync: whoever calls Sync after the answer changed finds the append
	// done and syncs it (see DeferSync).
	deferred := st.opts.DeferSync != nil && !st.opts.NoSync && st.opts.DeferSync(logs)
	if deferred {
		defer st.kickSyncerLocked() // before mu is unlocked
	} else {
		// What this append syncs must come with everything before it.
		if err := st.settleLocked(); err != nil {
			return err
		}
	}
	next := logs[0].Index
	if n := len(st.segs); n > 0 {
		next = st.segs[n-1].last() + 1
		if logs[0].Index > next {
			if err := st.settleLocked(); err != nil {
				return err
			}
			// raft appends past the end only after a snapshot
			// covered everything up to the new entries: what the log
			// holds is obsolete (as after removeOldLogs).
			if err := st.removeAllLocked(); err != nil {
				return err
			}
			next = logs[0].Index
		}
	}
	for i, l := range logs {
		if l.Index != next+uint64(i) {
			return fmt.Errorf("raftlog: entry %d does not follow the log, which ends before %d", l.Index, next+uint64(i))
		}
	}
	// An append that fails leaves the log as it was: raft takes a failed
	// append for one that wrote nothing, and appends the same indexes
	// again later (a leader that could not write steps down, and then
	// follows another).
	mark := st.markAppendLocked()
	if err := st.appendLocked(logs, deferred); err != nil {
		if rerr := st.rollbackLocked(mark); rerr != nil {
			st.err = fmt.Errorf("raftlog: undo a failed append: %w (the append failed with: %v)", rerr, err)
			st.cond.Broadcast()
		}
		return err
	}
	return nil
}

// appendMark is where the log was before an append (see rollbackLocked).
type appendMark struct {
	segs     int    // segments
	tailN    int    // records in the last segment
	tailEnd  int64  // where the last segment's written part ended
	pendFrom uint64 // st.pendFrom
	dirty    int    // len(st.dirty)
}

func (st *Store) markAppendLocked() appendMark {
	m := appendMark{segs: len(st.segs), pendFrom: st.pendFrom, dirty: len(st.dirty)}
	if tail := st.tail(); tail != nil {
		m.tailN, m.tailEnd = len(tail.offsets), tail.end
	}
	return m
}

// rollbackLocked undoes what an append wrote since m: the segments it
// made are removed, and the last one is cut back (zeroed, so nothing it
// wrote reads back at the next Open). st.mu is held.
func (st *Store) rollbackLocked(m appendMark) error {
	for st.syncing {
		st.cond.Wait() // the syncer uses the files without mu
	}
	if len(st.dirty) > m.dirty {
		st.dirty = st.dirty[:m.dirty]
	}
	if err := st.removeSegments(m.segs, len(st.segs)); err != nil {
		return err
	}
	if tail := st.tail(); tail != nil && len(tail.offsets) > m.tailN {
		if err := tail.zeroFrom(m.tailEnd, st.opts.NoSync); err != nil {
			return err
		}
		tail.offsets, tail.end = tail.offsets[:m.tailN], m.tailEnd
	}
	st.pendFrom = m.pendFrom
	st.setSyncedLocked()
	return nil
}

// appendLocked writes logs, which follow the log, to its segments; see
// StoreLogs. st.mu is held.
func (st *Store) appendLocked(logs []*raft.Log, deferred bool) error {
	var buf []byte
	var pending []int64 // offsets of the records in buf, relative to its start
	seg := st.tail()
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if _, err := seg.f.WriteAt(buf, seg.end); err != nil {
			return fmt.Errorf("raftlog: write %s: %w", seg.path, err)
		}
		if !deferred && !st.opts.NoSync {
			if err := seg.sync(); err != nil {
				return err
			}
		}
		firstNew := seg.first + uint64(len(seg.offsets))
		for _, o := range pending {
			seg.offsets = append(seg.offsets, seg.end+o)
		}
		seg.end += int64(len(buf))
		if deferred {
			// Pending from the moment they can be read back, also if a
			// later write of this append fails.
			st.markDirtyLocked(seg)
			if st.pendFrom == 0 {
				st.pendFrom = firstNew
				st.setSyncedLocked()
			}
		}
		buf, pending = buf[:0], pending[:0]
		return nil
	}
	for _, l := range logs {
		rec := appendRecord(nil, l)
		room := int64(0)
		if seg != nil {
			room = seg.size - seg.end - int64(len(buf))
		}
		// Keep room for the zero length that ends the written part.
		if seg == nil || int64(len(rec))+headerLen > room {
			if err := flush(); err != nil {
				return err
			}
			var err error
			if seg, err = st.newSegment(l.Index, int64(len(rec))+headerLen); err != nil {
				return err
			}
		}
		pending = append(pending, int64(len(buf)))
		buf = append(buf, rec...)
	}
	return flush()
}

// kickSyncerLocked asks the syncer, started if need be, to sync what is
// pending; st.mu is held.
func (st *Store) kickSyncerLocked() {
	if st.pendFrom == 0 {
		return
	}
	if st.kick == nil {
		st.kick, st.syncerDone = make(chan struct{}, 1), make(chan struct{})
		go st.syncer()
	}
	select {
	case st.kick <- struct{}{}:
	default: // a kick is already waiting
	}
}

// tail returns the segment appended to, or nil if there is none.
func (st *Store) tail() *segment {
	if len(st.segs) == 0 {
		return nil
	}
	return st.segs[len(st.segs)-1]
}

// newSegment creates and preallocates a segment whose first entry is
// first, with room for at least need bytes.
func (st *Store) newSegment(first uint64, need int64) (*segment, error) {
	size := max(st.opts.SegmentSize, need)
	path := filepath.Join(st.dir, segmentName(first))
	// Preallocate under a temporary name: a segment file of its own name
	// always has its full size, so a shorter one is damage.
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	if err := preallocateFile(f, size); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("raftlog: preallocate %s: %w", path, err)
	}
	if !st.opts.NoSync {
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("raftlog: sync %s: %w", path, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	if err := st.syncDir(); err != nil {
		f.Close()
		return nil, err
	}
	seg := &segment{path: path, first: first, size: size, f: f}
	st.segs = append(st.segs, seg)
	return seg, nil
}

func (st *Store) syncDir() error {
	if st.opts.NoSync {
		return nil
	}
	d, err := os.Open(st.dir)
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", st.dir, err)
	}
	return nil
}

// DeleteRange deletes the entries min through max. raft deletes either a
// prefix (after a snapshot) or a suffix (a conflict with the leader's
// log).
func (st *Store) DeleteRange(min, max uint64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.settleLocked(); err != nil {
		return err
	}
	if len(st.segs) == 0 || min > max {
		return nil
	}
	first, last := st.firstIndex(), st.tail().last()
	switch {
	case max < first || min > last:
		return nil
	case min <= first && max >= last:
		return st.removeAllLocked()
	case min <= first:
		// A prefix: record where the log now begins, then remove the
		// segments that hold only deleted entries.
		if err := st.setMarksLocked(LogMarks{First: max + 1, Last: last}); err != nil {
			return err
		}
		if err := st.setFirst(max + 1); err != nil {
			return err
		}
		n := 0
		for n < len(st.segs)-1 && st.segs[n].last() <= max {
			n++
		}
		if err := st.removeSegments(0, n); err != nil {
			return err
		}
		if st.first == st.segs[0].first {
			return st.setFirst(0)
		}
		return nil
	case max >= last:
		if err := st.setMarksLocked(LogMarks{First: first, Last: min - 1}); err != nil {
			return err
		}
		return st.cutFrom(min)
	}
	return fmt.Errorf("raftlog: cannot delete entries %d-%d from the middle of the log %d-%d", min, max, first, last)
}

// removeAllLocked empties the log: its marks first, then where it begins,
// then its segments, each step synced. A crash between two steps leaves a
// log that opens: segments without first-index begin at their own first
// entry (entries a snapshot covers, committed and the same on every
// member), where first-index without segments would be damage.
func (st *Store) removeAllLocked() error {
	if err := st.setMarksLocked(LogMarks{}); err != nil {
		return err
	}
	if err := st.setFirst(0); err != nil {
		return err
	}
	return st.removeSegments(0, len(st.segs))
}

// removeSegments closes and removes segments [i, j).
func (st *Store) removeSegments(i, j int) error {
	if i >= j {
		return nil
	}
	for _, seg := range st.segs[i:j] {
		seg.f.Close()
		if err := os.Remove(seg.path); err != nil {
			return fmt.Errorf("raftlog: %w", err)
		}
	}
	st.segs = slices.Delete(st.segs, i, j)
	return st.syncDir()
}

// cutFrom deletes the entries from index on, which is inside the log and
// after its first entry.
func (st *Store) cutFrom(index uint64) error {
	k := sort.Search(len(st.segs), func(i int) bool { return st.segs[i].last() >= index })
	// Later segments first: a crash in between leaves a log with a
	// clean end, never one with a hole.
	if err := st.removeSegments(k+1, len(st.segs)); err != nil {
		return err
	}
	seg := st.segs[k]
	if index == seg.first {
		return st.removeSegments(k, k+1)
	}
	i := index - seg.first
	off := seg.offsets[i]
	if err := seg.zeroFrom(off, st.opts.NoSync); err != nil {
		return err
	}
	seg.offsets = seg.offsets[:i]
	seg.end = off
	return nil
}

// Close syncs what is pending, stops the syncer and closes the segment
// files.
func (st *Store) Close() error {
	// Only a store that opened keeps marks: a log refused for falling
	// short of them must not overwrite them as it closes.
	marking := st.markStop != nil
	st.stopMarks()
	st.mu.Lock()
	first := st.settleLocked()
	if first == nil && !st.closed && marking {
		// Everything is synced: the marks can say so.
		first = st.setMarksLocked(st.currentMarksLocked())
	}
	if st.kick != nil && !st.closed {
		close(st.kick)
	}
	st.closed = true
	st.mu.Unlock()
	if st.syncerDone != nil {
		<-st.syncerDone
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, seg := range st.segs {
		if err := seg.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	st.segs = nil
	return first
}

// Inspect returns the index range the store in dir holds, reading it
// without changing anything (a torn tail is reported as the end, not
// repaired). An empty or missing store gives 0, 0.
func Inspect(dir string) (first, last uint64, err error) {
	names, err := segmentNames(dir)
	if err != nil {
		return 0, 0, err
	}
	st := &Store{dir: dir, opts: Options{NoSync: true}}
	for i, name := range names {
		seg, err := st.scanSegment(name, i == len(names)-1)
		if err != nil {
			return 0, 0, err
		}
		seg.f.Close()
		if seg.empty() {
			continue
		}
		if first == 0 {
			first = seg.first
		} else if seg.first != last+1 {
			return 0, 0, fmt.Errorf("%w: %s starts at index %d, but the log before it ends at %d", ErrCorrupt, seg.path, seg.first, last)
		}
		last = seg.last()
	}
	meta, err := readFirst(dir)
	if err != nil {
		return 0, 0, err
	}
	if meta != 0 {
		if meta < first || meta > last {
			return 0, 0, fmt.Errorf("%w: %s says the log begins at %d, but the segments hold %d-%d", ErrCorrupt,
				filepath.Join(dir, firstIndexFile), meta, first, last)
		}
		first = meta
	}
	return first, last, nil
}
