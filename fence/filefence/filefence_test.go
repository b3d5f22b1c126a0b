package filefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/filefence"
)

func open(t *testing.T) *filefence.Dir {
	t.Helper()
	d, err := filefence.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// listing returns the directory's files with their contents, to check
// that a refused write changed nothing.
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&b, "%s=%q\n", e.Name(), data)
	}
	return b.String()
}

func read(t *testing.T, d *filefence.Dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.Path(), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantStale(t *testing.T, err error, token, highest uint64) {
	t.Helper()
	se, ok := errors.AsType[*fence.StaleError](err)
	if !ok || !errors.Is(err, fence.ErrStale) || se.Token != token || se.Highest != highest {
		t.Fatalf("err = %v; want a StaleError for token %d behind %d", err, token, highest)
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	for _, s := range []struct {
		token   uint64
		stale   bool
		highest uint64
	}{{5, false, 5}, {5, false, 5}, {7, false, 7}, {6, true, 7}, {9, false, 9}, {1, true, 9}} {
		err := d.WriteFile(ctx, fence.Grant("jobs/x", s.token), "report", []byte(fmt.Sprintf("v%d", s.token)), 0o640)
		if s.stale {
			wantStale(t, err, s.token, s.highest)
		} else if err != nil {
			t.Fatalf("token %d: %v", s.token, err)
		}
	}
	if got := read(t, d, "report"); got != "v9" {
		t.Fatalf("report = %q, want v9", got)
	}
	if fi, _ := os.Stat(filepath.Join(d.Path(), "report")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode = %v, want 0640", fi.Mode().Perm())
	}
	if h, err := d.Highest("jobs/x"); err != nil || h != 9 {
		t.Fatalf("Highest = %d, %v", h, err)
	}
	// Another resource has a fence of its own.
	if err := d.WriteFile(ctx, fence.Grant("jobs/y", 1), "other", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := read(t, d, filefence.FenceFile); got != `{"jobs/x":9,"jobs/y":1}`+"\n" {
		t.Fatalf("fence file = %q", got)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	if err := d.WriteFile(ctx, fence.Grant("r", 4), "f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantStale(t, d.Remove(ctx, fence.Grant("r", 3), "f"), 3, 4)
	if read(t, d, "f") != "x" {
		t.Fatal("a stale Remove removed the file")
	}
	if err := d.Remove(ctx, fence.Grant("r", 5), "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Path(), "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if err := d.Remove(ctx, fence.Grant("r", 5), "f"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
}

func TestFailedWriteChangesNothing(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	if err := d.WriteFile(ctx, fence.Grant("r", 2), "f", []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := listing(t, d.Path())
	boom := errors.New("boom")
	err := d.Write(ctx, fence.Grant("r", 8), "f", 0o644, func(w io.Writer) error {
		io.WriteString(w, "half of the new")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want fn's error", err)
	}
	if after := listing(t, d.Path()); after != before {
		t.Fatalf("a failed write changed the directory:\n%s\nbecame\n%s", before, after)
	}
	// Renaming over a directory fails after the token was recorded: the
	// fence is put back.
	if err := os.Mkdir(filepath.Join(d.Path(), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	before = listing(t, d.Path())
	if err := d.WriteFile(ctx, fence.Grant("r", 9), "sub", []byte("x"), 0o644); err == nil {
		t.Fatal("writing over a directory succeeded")
	}
	if after := listing(t, d.Path()); after != before {
		t.Fatalf("a failed rename changed the directory:\n%s\nbecame\n%s", before, after)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	before := listing(t, d.Path())
	for _, tc := range []struct {
		name, file string
		l          fence.Lease
	}{
		{"empty resource", "f", fence.Grant("", 1)},
		{"token 0", "f", fence.Grant("r", 0)},
		{"empty name", "", fence.Grant("r", 1)},
		{"dot dot", "..", fence.Grant("r", 1)},
		{"path", "a/b", fence.Grant("r", 1)},
		{"the fence file", filefence.FenceFile, fence.Grant("r", 1)},
		{"the lock file", filefence.LockFile, fence.Grant("r", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := d.WriteFile(ctx, tc.l, tc.file, []byte("x"), 0o644); !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("WriteFile = %v, want ErrInvalid", err)
			}
			if err := d.Remove(ctx, tc.l, tc.file); !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("Remove = %v, want ErrInvalid", err)
			}
		})
	}
	if after := listing(t, d.Path()); after != before {
		t.Fatalf("bad input changed the directory:\n%s\nbecame\n%s", before, after)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, p := range []string{file, filepath.Join(t.TempDir(), "missing")} {
		if _, err := filefence.Open(p); err == nil {
			t.Errorf("Open(%s) succeeded", p)
		}
	}
}

// notWritable makes dir refuse new files, for this process too: with
// permissions, or, for root, whom permissions do not stop, with the
// immutable attribute.
func notWritable(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return
	}
	out, err := exec.Command("chattr", "+i", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("running as root, the test makes a directory immutable with chattr +i, which failed: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
}

func TestNotWritable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	dir := t.TempDir()
	notWritable(t, dir)
	_, err := filefence.Open(dir)
	if !errors.Is(err, filefence.ErrNotWritable) {
		t.Fatalf("Open = %v, want ErrNotWritable", err)
	}
	t.Logf("Open: %v", err)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Open left %v", entries)
	}

	// A directory that stopped being writable after it was opened.
	d := open(t)
	if err := d.WriteFile(ctx, fence.Grant("r", 1), "f", []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := listing(t, d.Path())
	notWritable(t, d.Path())
	err = d.WriteFile(ctx, fence.Grant("r", 2), "f", []byte("new"), 0o644)
	if !errors.Is(err, filefence.ErrNotWritable) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("WriteFile = %v, want ErrNotWritable", err)
	}
	t.Logf("WriteFile: %v", err)
	if after := listing(t, d.Path()); after != before {
		t.Fatalf("a refused write changed the directory:\n%s\nbecame\n%s", before, after)
	}
}

func TestLockWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	d := open(t)
	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- d.Write(context.Background(), fence.Grant("r", 1), "f", 0o644, func(w io.Writer) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { second <- d.WriteFile(ctx, fence.Grant("r", 2), "f", []byte("2"), 0o644) }()
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("a write waiting for the lock = %v after its context ended", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if h, _ := d.Highest("r"); h != 1 {
		t.Fatalf("fence = %d, want 1", h)
	}
}

// TestConcurrentWriters runs many writers with mixed tokens, each with a
// Dir of its own (as separate processes would have), replacing one file,
// with one stale writer held back until a newer one wrote. A reader reads
// the file all along. Afterwards: every content it ever saw was written
// by a writer told "ok", complete, with tokens never going down; the
// final content has the highest token accepted; stale writers left no
// trace, temporary files included.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	const resource = "shard/7"
	// content is large, so a half-written file would show.
	const copies = 20000
	content := func(w int, tok uint64) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("%d %d\n", w, tok)), copies)
	}
	type outcome struct {
		writer int
		token  uint64
		err    error
	}
	write := func(w int, tok uint64) outcome {
		d, err := filefence.Open(dir)
		if err == nil {
			err = d.WriteFile(ctx, fence.Grant(resource, tok), "state", content(w, tok), 0o644)
		}
		return outcome{w, tok, err}
	}
	if err := write(-1, 1).err; err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	seen := make(chan []string, 1)
	go func() {
		var heads []string
		for {
			select {
			case <-stop:
				seen <- heads
				return
			default:
			}
			b, err := os.ReadFile(filepath.Join(dir, "state"))
			if err != nil {
				heads = append(heads, "read error: "+err.Error())
				continue
			}
			line, _, _ := bytes.Cut(b, []byte("\n"))
			head := string(line)
			if !bytes.Equal(b, bytes.Repeat([]byte(head+"\n"), copies)) {
				heads = append(heads, "torn: "+head)
				continue
			}
			if len(heads) == 0 || heads[len(heads)-1] != head {
				heads = append(heads, head)
			}
		}
	}()

	const waves, perWave = 5, 8
	const writers = waves * perWave
	const newer, paused = writers, writers + 1
	results := make(chan outcome, writers+2)
	var wg sync.WaitGroup
	start := startWaves(&wg, waves, perWave, func(i int) {
		results <- write(i, uint64((i/perWave)*5+1+(i*7)%5))
	})
	newerDone := make(chan struct{})
	wg.Go(func() { <-newerDone; results <- write(paused, 3) })
	wg.Go(func() {
		<-start[waves-1]
		o := write(newer, 30)
		close(newerDone)
		results <- o
	})
	wg.Wait()
	close(results)
	close(stop)
	heads := <-seen

	ok := map[int]uint64{-1: 1}
	stale := map[int]bool{}
	var highest uint64 = 1
	for o := range results {
		switch {
		case o.err == nil:
			ok[o.writer] = o.token
			highest = max(highest, o.token)
		case errors.Is(o.err, fence.ErrStale):
			stale[o.writer] = true
		default:
			t.Fatalf("writer %d: %v", o.writer, o.err)
		}
	}
	if !stale[paused] {
		t.Fatal("the paused writer with token 3 was not refused")
	}
	if _, in := ok[newer]; !in {
		t.Fatal("the writer with token 30 was refused")
	}
	var last uint64
	for _, h := range heads {
		var w int
		var tok uint64
		if _, err := fmt.Sscanf(h, "%d %d", &w, &tok); err != nil {
			t.Fatalf("the reader saw %q", h)
		}
		if ok[w] != tok || stale[w] {
			t.Fatalf("the reader saw %q, which no writer told ok wrote", h)
		}
		if tok < last {
			t.Fatalf("the reader saw token %d after %d", tok, last)
		}
		last = tok
	}
	b, _ := os.ReadFile(filepath.Join(dir, "state"))
	var fw int
	var ftok uint64
	fmt.Sscanf(string(b), "%d %d", &fw, &ftok)
	if ftok != highest || ok[fw] != ftok {
		t.Fatalf("final content from writer %d with token %d; want the highest accepted token %d", fw, ftok, highest)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{filefence.FenceFile, filefence.LockFile, "state"}; !slices.Equal(names, want) {
		t.Fatalf("directory holds %v, want %v", names, want)
	}
	t.Logf("%d writers accepted, %d refused as stale; the reader saw %d contents", len(ok)-1, len(stale), len(heads))
}

// startWaves runs waves of perWave calls of fn(i), i counting from 0, on
// wg: wave k starts when wave k-1 has finished. It returns a channel per
// wave, closed when the wave starts.
func startWaves(wg *sync.WaitGroup, waves, perWave int, fn func(i int)) []chan struct{} {
	start := make([]chan struct{}, waves+1)
	for k := range start {
		start[k] = make(chan struct{})
	}
	for k := range waves {
		var wave sync.WaitGroup
		for j := range perWave {
			wave.Add(1)
			wg.Go(func() {
				defer wave.Done()
				<-start[k]
				fn(k*perWave + j)
			})
		}
		wg.Go(func() { <-start[k]; wave.Wait(); close(start[k+1]) })
	}
	close(start[0])
	return start[:waves]
}
