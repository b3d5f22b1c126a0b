package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// memMarks keeps marks in memory, as raft.db keeps them for a node.
type memMarks struct {
	mu    sync.Mutex
	m     LogMarks
	saves int
}

func (k *memMarks) LoadMarks() (LogMarks, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m, nil
}

func (k *memMarks) SaveMarks(m LogMarks) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m = m
	k.saves++
	return nil
}

func (k *memMarks) get() LogMarks {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m
}

func openMarked(dir string, k *memMarks) (*Store, error) {
	return Open(dir, Options{SegmentSize: 4096, Marks: k})
}

func mustOpenMarked(t *testing.T, dir string, k *memMarks) *Store {
	t.Helper()
	st, err := openMarked(dir, k)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return st
}

func mustClose(t *testing.T, st *Store) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := segmentNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Join(dir, n)
	}
	return names
}

// A log whose files were deleted, or whose last segment lost synced
// entries, is refused; marks say how far it reached.
func TestMarksRefuseALogThatLostEntries(t *testing.T) {
	damage := map[string]func(t *testing.T, dir string){
		"every file deleted": func(t *testing.T, dir string) {
			for _, f := range segmentFiles(t, dir) {
				os.Remove(f)
			}
		},
		"the directory replaced": func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		},
		"the last segment deleted": func(t *testing.T, dir string) {
			segs := segmentFiles(t, dir)
			os.Remove(segs[len(segs)-1])
		},
		"the first segment deleted": func(t *testing.T, dir string) {
			os.Remove(segmentFiles(t, dir)[0])
		},
		"the last segment zeroed after its first record": func(t *testing.T, dir string) {
			segs := segmentFiles(t, dir)
			st, err := Open(dir, Options{SegmentSize: 4096, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			seg := st.tail()
			off := seg.offsets[1]
			st.Close()
			f, err := os.OpenFile(segs[len(segs)-1], os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 4096), off); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "log")
			k := &memMarks{}
			st := mustOpenMarked(t, dir, k)
			appendRange(t, st, 1, 70) // several segments
			mustClose(t, st)
			if got := k.get(); got != (LogMarks{First: 1, Last: 70}) {
				t.Fatalf("marks after Close: %+v, want 1-70", got)
			}
			f(t, dir)
			st, err := openMarked(dir, k)
			if err == nil {
				st.Close()
				t.Fatal("Open accepted a log that lost synced entries")
			}
			if !errors.Is(err, ErrLost) {
				t.Fatalf("Open: %v, want ErrLost", err)
			}
			t.Logf("refused as it should: %v", err)
			// The refusal leaves the marks as they were.
			if got := k.get(); got != (LogMarks{First: 1, Last: 70}) {
				t.Fatalf("marks after the refused Open: %+v, want 1-70", got)
			}
		})
	}
}

// raft's own deletions lower the marks first: a log cut by raft, or
// emptied after a snapshot was installed, opens again.
func TestMarksFollowRaftsDeletions(t *testing.T) {
	dir := t.TempDir()
	k := &memMarks{}
	st := mustOpenMarked(t, dir, k)
	appendRange(t, st, 1, 70)
	if err := st.DeleteRange(1, 30); err != nil { // compaction
		t.Fatal(err)
	}
	if got := k.get(); got.First != 31 {
		t.Fatalf("marks after a prefix deletion: %+v, want First 31", got)
	}
	if err := st.DeleteRange(65, 70); err != nil { // a conflict with a leader
		t.Fatal(err)
	}
	if got := k.get(); got.Last != 64 {
		t.Fatalf("marks after cutting 65-70: %+v, want Last 64", got)
	}
	// A crash right after the cut (no Close): the marks are already low.
	st2 := mustOpenMarked(t, dir, k)
	checkRange(t, st2, 31, 64)
	if err := st2.DeleteRange(31, 64); err != nil { // a snapshot installed
		t.Fatal(err)
	}
	st3 := mustOpenMarked(t, dir, k)
	checkRange(t, st3, 0, 0)
	// Entries after a snapshot start past the end.
	appendRange(t, st3, 100, 110)
	mustClose(t, st3)
	if got := k.get(); got != (LogMarks{First: 100, Last: 110}) {
		t.Fatalf("marks: %+v, want 100-110", got)
	}
	mustClose(t, mustOpenMarked(t, dir, k))
	st.Close()
	st2.Close()
}

// The marks follow appends every MarkInterval, without a Close; they
// never claim an entry the log has not synced.
func TestMarksFollowAppends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &memMarks{}
		gate := make(chan struct{})
		st, err := Open(t.TempDir(), Options{
			SegmentSize:          4096,
			Marks:                k,
			MarkInterval:         time.Second,
			DeferSync:            func([]*raft.Log) bool { return true },
			BeforeBackgroundSync: func() { <-gate },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		appendRange(t, st, 1, 10)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := k.get(); got.Last != 0 {
			t.Fatalf("marks claim entries up to %d, none of them synced", got.Last)
		}
		close(gate)
		if err := st.WaitSynced(10); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := k.get(); got != (LogMarks{First: 1, Last: 10}) {
			t.Fatalf("marks %+v a second after entries 1-10 were synced, want 1-10", got)
		}
	})
}

func TestMarksCheck(t *testing.T) {
	for _, c := range []struct {
		m           LogMarks
		first, last uint64
		lost        bool
	}{
		{LogMarks{}, 0, 0, false},
		{LogMarks{First: 1, Last: 23}, 0, 0, true},
		{LogMarks{First: 1, Last: 23}, 1, 20, true},
		{LogMarks{First: 1, Last: 23}, 1, 23, false},
		{LogMarks{First: 1, Last: 23}, 1, 40, false},
		{LogMarks{First: 5, Last: 23}, 6, 30, true},
		{LogMarks{First: 5, Last: 23}, 3, 30, false},
		{LogMarks{First: 5}, 0, 0, false},
	} {
		err := c.m.Check(c.first, c.last)
		if (err != nil) != c.lost || (err != nil && !errors.Is(err, ErrLost)) {
			t.Errorf("%+v.Check(%d, %d) = %v, want lost %v", c.m, c.first, c.last, err, c.lost)
		}
	}
	b := LogMarks{First: 7, Last: 9}.Bytes()
	if m, err := ParseMarks(b); err != nil || m != (LogMarks{First: 7, Last: 9}) {
		t.Fatalf("ParseMarks(Bytes) = %+v, %v", m, err)
	}
	if _, err := ParseMarks(b[:5]); err == nil {
		t.Fatal("ParseMarks accepted 5 bytes")
	}
}

// Open syncs every segment: a deferred append that crossed into a new
// segment left records unsynced in more than the last one, and a crash
// (here: the store is simply abandoned) left them in the page cache.
func TestOpenSyncsEverySegment(t *testing.T) {
	dir := t.TempDir()
	gate := make(chan struct{})
	crashed, err := Open(dir, Options{
		SegmentSize:          4096,
		DeferSync:            func([]*raft.Log) bool { return true },
		BeforeBackgroundSync: func() { <-gate },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(gate); crashed.Close() }()
	appendRange(t, crashed, 1, 70) // entries 51-60 get segments of their own
	segs := segmentFiles(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs several", len(segs))
	}
	var mu sync.Mutex
	var synced []string
	orig := fdatasync
	fdatasync = func(f *os.File) error {
		mu.Lock()
		synced = append(synced, f.Name())
		mu.Unlock()
		return orig(f)
	}
	st, err := Open(dir, Options{SegmentSize: 4096})
	fdatasync = orig
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range segs {
		if !slices.Contains(synced, s) {
			t.Errorf("Open did not sync %s, which held unsynced records", s)
		}
	}
}

// DeferSync is asked under the store's lock, in one step with the append
// it decides on: a Sync (which a raft node calls before it records a new
// term) that begins after the answer always finds the append done.
func TestDeferSyncIsAskedUnderTheLock(t *testing.T) {
	var st *Store
	asked, unlocked := 0, 0
	st, err := Open(t.TempDir(), Options{DeferSync: func([]*raft.Log) bool {
		asked++
		if st.mu.TryLock() {
			unlocked++
			st.mu.Unlock()
		}
		return true
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	appendRange(t, st, 1, 3)
	appendRange(t, st, 4, 9)
	if asked != 2 || unlocked != 0 {
		t.Fatalf("DeferSync asked %d times, %d of them without the store's lock held", asked, unlocked)
	}
}
