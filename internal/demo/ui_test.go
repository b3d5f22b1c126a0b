package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineWriter collects what the demo writes for --ui and hands each line to
// a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.lines <- strings.TrimSpace(line)
	}
}

// With UI, the demo prints the dashboard's address, plays the scenario as
// usual, and keeps the dashboard up until the context ends; the dashboard
// shows the fenced lease's two terms and A's rejected write.
func TestRunUIServesTheTimeline(t *testing.T) {
	var out bytes.Buffer
	cfg := testConfig(&out)
	cfg.Scenarios = []Scenario{Fenced}
	uiOut := &lineWriter{lines: make(chan string, 10)}
	cfg.UI, cfg.UIOut = true, uiOut
	ctx, cancel := context.WithCancel(ctxT(t, 60*time.Second))
	defer cancel()
	type ran struct {
		results []Result
		err     error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(ctx, cfg)
		done <- ran{res, err}
	}()

	next := func(what string) string {
		select {
		case l := <-uiOut.lines:
			return l
		case r := <-done:
			t.Fatalf("the demo ended (%v) before printing %s", r.err, what)
		case <-ctx.Done():
			t.Fatalf("no %s", what)
		}
		return ""
	}
	first := next("the dashboard's address")
	_, url, ok := strings.Cut(first, "http://")
	if !ok || !strings.HasSuffix(url, "/ui/#timeline/demo/") {
		t.Fatalf("first line %q has no dashboard address", first)
	}
	url = "http://" + url
	if l := next("that the dashboard stays up"); !strings.Contains(l, "stays up") {
		t.Fatalf("second line %q, want the dashboard staying up", l)
	}

	// The scenarios are over and the cluster still serves the page and
	// the history of the fenced lease.
	base := strings.TrimSuffix(url, "#timeline/demo/")
	for _, path := range []string{"", "api/history?prefix=demo/"} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", base+path, res.Status, body)
		}
		if path == "" {
			if !strings.Contains(string(body), "tenure dashboard") {
				t.Errorf("GET %s is not the dashboard: %.200s", base, body)
			}
			continue
		}
		var h struct {
			Histories []struct {
				Name  string
				Terms []struct {
					Holder string
					Token  uint64
				}
				Stale []struct{ Token uint64 }
			}
		}
		if err := json.Unmarshal(body, &h); err != nil {
			t.Fatal(err)
		}
		if len(h.Histories) != 1 || h.Histories[0].Name != "demo/fenced" {
			t.Fatalf("histories = %+v, want demo/fenced", h.Histories)
		}
		f := h.Histories[0]
		if len(f.Terms) != 2 || f.Terms[0].Holder != "A" || f.Terms[1].Holder != "B" || f.Terms[1].Token <= f.Terms[0].Token {
			t.Errorf("terms = %+v, want A's then B's with a larger token", f.Terms)
		}
		if len(f.Stale) != 1 || f.Stale[0].Token != f.Terms[0].Token {
			t.Errorf("stale writes = %+v, want A's with token %d", f.Stale, f.Terms[0].Token)
		}
	}

	select {
	case r := <-done:
		t.Fatalf("the demo ended (%v) while the dashboard should stay up", r.err)
	default:
	}
	cancel()
	r := <-done
	if r.err != nil || len(r.results) != 1 || !r.results[0].Passed {
		t.Fatalf("Run = %+v, %v; want the fenced scenario passed", r.results, r.err)
	}
	if !strings.Contains(out.String(), `"type":"summary"`) {
		t.Errorf("the timeline has no summary:\n%s", out.String())
	}
}

func TestUIRefusesReal(t *testing.T) {
	cfg := testConfig(io.Discard)
	cfg.Real, cfg.WorkerCommand = true, []string{"x"}
	cfg.UI, cfg.UIOut = true, io.Discard
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "drop --real") {
		t.Errorf("Validate = %v, want --ui refused with --real", err)
	}
}
