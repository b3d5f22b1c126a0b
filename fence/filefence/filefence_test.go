package filefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/filefence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
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
			fencetest.WantStale(t, err, s.token, s.highest)
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
	fencetest.WantStale(t, d.Remove(ctx, fence.Grant("r", 3), "f"), 3, 4)
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
	write := func(w int, tok uint64) error {
		d, err := filefence.Open(dir)
		if err != nil {
			return err
		}
		content := bytes.Repeat([]byte(fencetest.Entry{Writer: w, Token: tok}.String()+"\n"), copies)
		return d.WriteFile(ctx, fence.Grant(resource, tok), "state", content, 0o644)
	}
	if err := write(-1, 1); err != nil {
		t.Fatal(err)
	}

	reading, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan []string, 1)
	go func() {
		var heads []string
		for {
			select {
			case <-reading.Done():
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

	res := fencetest.Waves{Waves: 5, PerWave: 8, Newer: 30}.Run(t, write)
	stop()
	res.OK[-1] = 1 // the first write, before the reader started
	heads := <-seen
	t.Logf("the reader saw %d contents", len(heads))
	res.CheckLog(t, fencetest.ParseLog(t, heads), false)
	highest := slices.Max(slices.Collect(maps.Values(res.OK)))
	b, _ := os.ReadFile(filepath.Join(dir, "state"))
	var fw int
	var ftok uint64
	fmt.Sscanf(string(b), "%d %d", &fw, &ftok)
	if ftok != highest || res.OK[fw] != ftok {
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
}
