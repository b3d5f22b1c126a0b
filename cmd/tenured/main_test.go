package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/dirdigest"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// initDataDir runs tenured on a new data directory until it leads, then
// stops it.
func initDataDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	runUntilLeading(t, "--data-dir", dir, "--election-timeout", "100ms", "--raft-log-level", "error")
	return dir
}

// runUntilLeading runs tenured with args until it leads, then stops it
// as SIGTERM would, and returns its log. A start that does not lead
// within 20s, or a stop that does not exit 0, fails the test.
func runUntilLeading(t *testing.T, args ...string) string {
	t.Helper()
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}, args...), io.Discard, &out, noEnv)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "msg=leading") && !strings.Contains(out.String(), `"msg":"leading"`) {
		if time.Now().After(deadline) {
			cancel()
			<-code
			t.Fatalf("tenured %s did not lead within 20s; its log:\n%s", strings.Join(args, " "), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("tenured %s exited %d after a normal stop; its log:\n%s", strings.Join(args, " "), c, out.String())
	}
	return out.String()
}

func listing(t *testing.T, dir string) string {
	t.Helper()
	d, err := dirdigest.Of(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tenured refuses a damaged data directory: exit 1, a message naming the
// file and the way out, and the directory as it was.
func TestRefusesDamagedDataDir(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(dir string) error
		file   string
	}{
		{"raft.db emptied", func(d string) error { return os.Truncate(filepath.Join(d, "raft.db"), 0) }, "raft.db"},
		{"raft.db deleted", func(d string) error { return os.Remove(filepath.Join(d, "raft.db")) }, "raft.db"},
		{"node-id deleted", func(d string) error { return os.Remove(filepath.Join(d, "node-id")) }, "node-id"},
		{"node-id emptied", func(d string) error { return os.WriteFile(filepath.Join(d, "node-id"), nil, 0o600) }, "node-id"},
		{"snapshot directory deleted", func(d string) error { return os.RemoveAll(filepath.Join(d, "snapshots")) }, "snapshots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := initDataDir(t)
			if err := tc.damage(dir); err != nil {
				t.Fatal(err)
			}
			before := listing(t, dir)
			var out syncBuffer
			code := run(t.Context(), []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}, io.Discard, &out, noEnv)
			if code != 1 {
				t.Fatalf("exit %d, want 1; output:\n%s", code, out.String())
			}
			msg := out.String()
			if !strings.Contains(msg, filepath.Join(dir, tc.file)) || !strings.Contains(msg, "--reset-data-dir") {
				t.Errorf("the message does not name %s and the way out:\n%s", tc.file, msg)
			}
			if after := listing(t, dir); after != before {
				t.Fatalf("the refused start changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// --reset-data-dir moves the old data aside and starts a new cluster.
func TestResetDataDir(t *testing.T) {
	dir := initDataDir(t)
	if err := os.Truncate(filepath.Join(dir, "raft.db"), 0); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)
	out := runUntilLeading(t, "--data-dir", dir, "--reset-data-dir", "--election-timeout", "100ms")
	olds, _ := filepath.Glob(dir + ".old-*")
	if len(olds) != 1 {
		t.Fatalf("old data moved to %v, want one %s.old-* directory", olds, dir)
	}
	if got := listing(t, olds[0]); got != before {
		t.Fatalf("the old data was changed when moved aside:\n%s\nwant:\n%s", got, before)
	}
	if !strings.Contains(out, "starting a NEW cluster") {
		t.Errorf("no warning about the new cluster in:\n%s", out)
	}
}

// The clock-rate fault injector is not a setting: -h leaves it out, and
// a node started with it says loudly that its leases are not to be
// trusted.
func TestFaultInjectorHiddenAndLoud(t *testing.T) {
	var help syncBuffer
	if code := run(t.Context(), []string{"-h"}, io.Discard, &help, noEnv); code != 0 {
		t.Fatalf("-h exited %d", code)
	}
	for _, hidden := range []string{faultClockRateFlag, faultSkipFsyncFlag} {
		if strings.Contains(help.String(), hidden) {
			t.Fatalf("-h shows the fault injector %s:\n%s", hidden, help.String())
		}
	}
	for _, flag := range []string{"--data-dir", "--raft-multiplier", "--reset-data-dir"} {
		if !strings.Contains(help.String(), flag) {
			t.Errorf("-h does not show %s", flag)
		}
	}
	out := runUntilLeading(t, "--dev", "--"+faultClockRateFlag, "1.25")
	if !strings.Contains(out, "level=WARN msg=\"FAULT INJECTION") {
		t.Fatalf("no loud warning for the clock-rate fault injector in:\n%s", out)
	}
	out = runUntilLeading(t, "--dev", "--"+faultSkipFsyncFlag)
	if !strings.Contains(out, "level=WARN msg=\"FAULT INJECTION: this node never fsyncs") {
		t.Fatalf("no loud warning for the skip-fsync fault injector in:\n%s", out)
	}
	var bad syncBuffer
	if code := run(t.Context(), []string{"--" + faultClockRateFlag, "0"}, io.Discard, &bad, noEnv); code != 2 {
		t.Fatalf("a clock rate of 0 exited %d, want 2", code)
	}
}

// A first start on a raft port that is taken fails with the port named
// and leaves no data directory behind.
func TestBusyRaftPortLeavesNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := filepath.Join(t.TempDir(), "data")
	var out syncBuffer
	code := run(t.Context(), []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--raft-listen", busy.Addr().String()}, io.Discard, &out, noEnv)
	if code != 1 || !strings.Contains(out.String(), "raft listen on "+busy.Addr().String()) {
		t.Fatalf("exit %d, want 1 naming the raft port; output:\n%s", code, out.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed start left %s behind (stat: %v)", dir, err)
	}
}
