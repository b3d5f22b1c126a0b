package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// entry returns the entry the tests store at index i; its size depends
// on i alone (entries 51-60 are larger than a small segment).
func entry(i uint64) *raft.Log {
	size := int(i*37) % 300
	if i >= 51 && i <= 60 {
		size = 10000
	}
	data := bytes.Repeat([]byte{byte(i)}, size)
	return &raft.Log{Index: i, Term: i/10 + 1, Type: raft.LogCommand, Data: data,
		AppendedAt: time.Unix(1700000000, int64(i)), Extensions: []byte(fmt.Sprint("ext", i))}
}

func mustOpen(t *testing.T, dir string, size int64) *Store {
	t.Helper()
	st, err := Open(dir, Options{SegmentSize: size})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func appendRange(t *testing.T, st *Store, from, to uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, entry(i))
	}
	if err := st.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs %d-%d: %v", from, to, err)
	}
}

// checkRange checks that the store holds exactly the entries first..last
// as entry made them.
func checkRange(t *testing.T, st *Store, first, last uint64) {
	t.Helper()
	f, _ := st.FirstIndex()
	l, _ := st.LastIndex()
	if f != first || l != last {
		t.Fatalf("log holds %d-%d, want %d-%d", f, l, first, last)
	}
	for i := first; i <= last && last > 0; i++ {
		var got raft.Log
		if err := st.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog %d: %v", i, err)
		}
		want := entry(i)
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
			!got.AppendedAt.Equal(want.AppendedAt) || !bytes.Equal(got.Extensions, want.Extensions) {
			t.Fatalf("entry %d reads back as %+v", i, got)
		}
	}
	var none raft.Log
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		if err := st.GetLog(i, &none); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog %d outside the log: %v, want ErrLogNotFound", i, err)
		}
	}
}

func TestAppendReadReopen(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir, 4096) // small segments: many rotations
	appendRange(t, st, 1, 1)
	appendRange(t, st, 2, 50)
	appendRange(t, st, 51, 60) // each larger than a segment
	checkRange(t, st, 1, 60)
	st.Close()
	st = mustOpen(t, dir, 4096)
	checkRange(t, st, 1, 60)
	if err := st.StoreLogs([]*raft.Log{entry(60)}); err == nil {
		t.Fatal("an entry that overlaps the log was accepted")
	}
	appendRange(t, st, 61, 70)
	checkRange(t, st, 1, 70)
	// Past the end (after a snapshot install): the old log goes.
	appendRange(t, st, 100, 105)
	checkRange(t, st, 100, 105)
	st.Close()
	st = mustOpen(t, dir, 4096)
	checkRange(t, st, 100, 105)
}

func TestDeleteRange(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir, 2048)
	appendRange(t, st, 1, 100)
	// A prefix is deleted exactly (segments that hold only deleted
	// entries go), also across a reopen.
	if err := st.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	const first = 41
	checkRange(t, st, first, 100)
	if len(st.segs) < 2 || st.segs[0].first > first || st.segs[0].first == 1 {
		t.Fatalf("after deleting 1-40 the first segment starts at %d", st.segs[0].first)
	}
	st.Close()
	st = mustOpen(t, dir, 2048)
	checkRange(t, st, first, 100)
	// A suffix is cut exactly, and new entries follow the cut.
	if err := st.DeleteRange(77, 100); err != nil {
		t.Fatal(err)
	}
	checkRange(t, st, first, 76)
	appendRange(t, st, 77, 80)
	st.Close()
	st = mustOpen(t, dir, 2048)
	checkRange(t, st, first, 80)
	// Everything, then a new start (as after a snapshot install).
	if err := st.DeleteRange(first, 80); err != nil {
		t.Fatal(err)
	}
	checkRange(t, st, 0, 0)
	appendRange(t, st, 500, 510)
	st.Close()
	st = mustOpen(t, dir, 2048)
	checkRange(t, st, 500, 510)
}

// Entries cut off by a suffix deletion never come back, even where newer,
// shorter entries were written over them.
func TestCutEntriesDoNotReturn(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir, 1<<20)
	appendRange(t, st, 1, 20)
	if err := st.DeleteRange(10, 20); err != nil {
		t.Fatal(err)
	}
	appendRange(t, st, 10, 10) // much shorter than what was there
	st.Close()
	st = mustOpen(t, dir, 1<<20)
	f, l := must2(st.FirstIndex())(st.LastIndex())
	if f != 1 || l != 10 {
		t.Fatalf("after the cut and one new entry the log holds %d-%d, want 1-10", f, l)
	}
}

func must2(a uint64, _ error) func(uint64, error) (uint64, uint64) {
	return func(b uint64, _ error) (uint64, uint64) { return a, b }
}

// A torn write at the end of the last segment (a crash in the middle of
// an append) ends the log there; the garbage is zeroed, so that nothing
// after it can be read back later.
func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(b []byte, off int) // b is the segment, off the start of the 11th record
	}{
		{"half a record", func(b []byte, off int) { clear(b[off+20:]) }},
		{"header only", func(b []byte, off int) { clear(b[off+8:]) }},
		{"flipped byte", func(b []byte, off int) { b[off+30] ^= 0xff }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := mustOpen(t, dir, 1<<20)
			appendRange(t, st, 1, 12)
			off := st.segs[0].offsets[10]
			path := st.segs[0].path
			st.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.tear(b, int(off))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			st = mustOpen(t, dir, 1<<20)
			checkRange(t, st, 1, 10)
			after, _ := os.ReadFile(path)
			if !allZero(after[off:]) {
				t.Fatal("the torn tail was not zeroed")
			}
			appendRange(t, st, 11, 11)
			st.Close()
			st = mustOpen(t, dir, 1<<20)
			if l, _ := st.LastIndex(); l != 11 {
				t.Fatalf("last index %d after appending to a repaired log, want 11", l)
			}
		})
	}
}

// Damage anywhere but at the end of the log is corruption: Open fails and
// names the file.
func TestCorruptionRefused(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir, 4096)
	appendRange(t, st, 1, 60)
	if len(st.segs) < 3 {
		t.Fatalf("want several segments, got %d", len(st.segs))
	}
	path, off := st.segs[0].path, st.segs[0].offsets[2]
	st.Close()
	b, _ := os.ReadFile(path)
	b[off+40] ^= 0xff
	os.WriteFile(path, b, 0o600)
	_, err := Open(dir, Options{SegmentSize: 4096})
	if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(filepath.Base(path))) {
		t.Fatalf("Open of a log with a corrupt middle segment: %v, want ErrCorrupt naming %s", err, filepath.Base(path))
	}
	// A missing middle segment is a hole.
	dir2 := t.TempDir()
	st = mustOpen(t, dir2, 4096)
	appendRange(t, st, 1, 60)
	mid := st.segs[1].path
	st.Close()
	os.Remove(mid)
	if _, err := Open(dir2, Options{SegmentSize: 4096}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a log with a missing segment: %v, want ErrCorrupt", err)
	}
}

// A segment cut short (emptied) is damage, not an end of the log.
func TestShortSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir, 1<<20)
	appendRange(t, st, 1, 30)
	path := st.segs[0].path
	st.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with an emptied segment: %v, want ErrCorrupt", err)
	}
	if _, _, err := Inspect(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Inspect with an emptied segment: %v, want ErrCorrupt", err)
	}
}

// Opening a store reads each segment only up to the end of its written
// part, not the preallocated rest: with 64 MiB segments, reading them
// whole made a node under the race detector and a loaded machine take
// ten seconds and more to restart.
func TestOpenReadsOnlyTheWrittenPart(t *testing.T) {
	const size = 256 << 20
	dir := t.TempDir()
	st, err := Open(dir, Options{SegmentSize: size, NoSync: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	appendRange(t, st, 1, 20)
	st.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st, err = Open(dir, Options{SegmentSize: size, NoSync: true})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.Close()
	checkRange(t, st, 1, 20)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("reopening a %d MiB segment holding 20 entries allocated %d MiB; it should read only what was written",
			size>>20, got>>20)
	}
}

// An append that fails part way (here the disk is full when it needs a
// new segment) leaves the log as it was, on disk too: raft takes it for
// an append that wrote nothing and appends the same indexes again.
func TestFailedAppendLeavesTheLogAsItWas(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		t.Run(fmt.Sprintf("deferred=%v", deferred), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentSize: 4096}
			if deferred {
				opts.DeferSync = func([]*raft.Log) bool { return true }
			}
			st, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			appendRange(t, st, 1, 15) // most of the first segment
			full := errors.New("no space left on device")
			preallocateFile = func(*os.File, int64) error { return full }
			var logs []*raft.Log
			for i := uint64(16); i <= 40; i++ {
				logs = append(logs, entry(i))
			}
			err = st.StoreLogs(logs)
			preallocateFile = preallocate
			if !errors.Is(err, full) {
				t.Fatalf("StoreLogs with the disk full: %v, want the preallocation's error", err)
			}
			checkRange(t, st, 1, 15)
			if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) > 0 {
				t.Fatalf("a failed segment was left behind: %v", tmp)
			}
			if err := st.Sync(); err != nil {
				t.Fatal(err)
			}
			re := mustOpen(t, dir, 4096)
			checkRange(t, re, 1, 15)
			re.Close()
			// Space is back: the same entries go in.
			if err := st.StoreLogs(logs); err != nil {
				t.Fatalf("StoreLogs once space is back: %v", err)
			}
			if err := st.Sync(); err != nil {
				t.Fatal(err)
			}
			checkRange(t, st, 1, 40)
		})
	}
}

// Emptying the log (raft does after installing a snapshot) is done in an
// order whose every intermediate state opens: a crash (here a failure)
// between its steps never leaves first-index without segments.
func TestEmptyingTheLogCanStopAnywhere(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir, 4096)
	appendRange(t, st, 1, 70)
	if err := st.DeleteRange(1, 25); err != nil { // first-index now says 26
		t.Fatal(err)
	}
	if first, _ := readFirst(dir); first != 26 {
		t.Fatalf("first-index holds %d, want 26", first)
	}
	stuck := errors.New("the machine stopped here")
	removeFile = func(path string) error {
		if filepath.Base(path) == firstIndexFile {
			return stuck
		}
		return os.Remove(path)
	}
	err := st.DeleteRange(26, 70)
	removeFile = os.Remove
	if !errors.Is(err, stuck) {
		t.Fatalf("DeleteRange: %v, want the failure", err)
	}
	st.Close()
	re, err := Open(dir, Options{SegmentSize: 4096})
	if err != nil {
		t.Fatalf("the log does not open after emptying it stopped part way: %v", err)
	}
	defer re.Close()
	if last, _ := re.LastIndex(); last != 70 && last != 0 {
		t.Fatalf("log ends at %d after the stopped emptying, want all of it (70) or none", last)
	}
}
