package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
)

// lineWriter passes every line written to it to a channel. The CLI writes
// each line with one Write.
type lineWriter struct{ lines chan string }

func (w lineWriter) Write(p []byte) (int, error) {
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l != "" {
			w.lines <- l
		}
	}
	return len(p), nil
}

// watchThree sends a current lease, the synced marker and a grant, then
// waits for the watch to end.
func watchThree(ctx context.Context, req *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error {
	for _, ev := range []*tenurev1.WatchEvent{
		{Type: tenurev1.WatchEvent_TYPE_CURRENT, Lease: protoLease(req.GetPrefix()+"a", "h1", 1, 5*time.Second)},
		{Type: tenurev1.WatchEvent_TYPE_SYNCED},
		{Type: tenurev1.WatchEvent_TYPE_GRANTED, Lease: protoLease(req.GetPrefix()+"b", "h2", 4, 10*time.Second), Index: 12},
	} {
		if err := send(ev); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func TestWatchUntilInterrupted(t *testing.T) {
	c := startCluster(t, func(s *fakeserver.Server) { s.Watch = watchThree })
	tests := []struct {
		output string
		want   []string
	}{
		{"text", []string{
			"current jobs/a holder=h1 token=1 ttl=5s remaining=4.98s\n",
			"synced (changes follow)\n",
			"granted jobs/b holder=h2 token=4 ttl=10s remaining=9.98s index=12\n",
		}},
		{"json", []string{
			`{"type":"current","name":"jobs/a","holder":"h1","token":1,"ttl":"5s","remaining":"4.98s"}` + "\n",
			`{"type":"synced"}` + "\n",
			`{"type":"granted","name":"jobs/b","holder":"h2","token":4,"ttl":"10s","remaining":"9.98s","index":12}` + "\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.output, func(t *testing.T) {
			// Cancelling ctx is what SIGINT does to the real command.
			ctx, interrupt := context.WithCancel(t.Context())
			defer interrupt()
			out := lineWriter{lines: make(chan string, 16)}
			var errb bytes.Buffer
			code := make(chan int, 1)
			go func() {
				code <- run(ctx, []string{"watch", "jobs/", "-o", tt.output, "--endpoints", c.addr}, out, &errb,
					func(string) string { return "" })
			}()
			for _, want := range tt.want {
				if got := <-out.lines; got != want {
					t.Errorf("line = %q, want %q", got, want)
				}
			}
			interrupt()
			if got := <-code; got != exitOK {
				t.Errorf("exit code after interrupt = %d, want 0 (stderr %q)", got, errb.String())
			}
		})
	}
}

func TestWatchUnreachable(t *testing.T) {
	res := runCLI(t.Context(), nil, "watch", "--endpoints", fakeserver.DeadAddr(t), "--request-timeout", "100ms")
	if res.code != exitFailure || !strings.HasPrefix(res.stderr, "tenure: client: no endpoint could serve the request") {
		t.Errorf("got code %d, stderr %q; want 1 and an unavailable error", res.code, res.stderr)
	}
}
