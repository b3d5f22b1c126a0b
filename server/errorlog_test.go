package server_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/server"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// A flood of HTTP server errors leaves the first burst lines, then one
// line per period with how many were dropped; the next period logs
// again.
func TestErrorLogFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf lockedBuffer
		el := server.NewErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), 3, time.Minute)
		for i := range 1000 {
			el.Printf("http: TLS handshake error from 127.0.0.1:%d: EOF", i)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		el.Printf("http: TLS handshake error from 127.0.0.1:1: EOF")
		lines := buf.lines()
		if len(lines) != 5 {
			t.Fatalf("%d lines, want 3, a summary and 1 more:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		for i, l := range lines[:3] {
			if want := fmt.Sprintf("127.0.0.1:%d: EOF", i); !strings.Contains(l, want) || !strings.Contains(l, "level=WARN") {
				t.Errorf("line %d = %q, want a warning with %q", i, l, want)
			}
		}
		if !strings.Contains(lines[3], "dropped=997") {
			t.Errorf("summary %q, want dropped=997", lines[3])
		}
		if !strings.Contains(lines[4], "127.0.0.1:1: EOF") {
			t.Errorf("after the period: %q, want the next error logged", lines[4])
		}
	})
}
