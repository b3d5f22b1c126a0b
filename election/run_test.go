package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

// term is one holder's term of leadership as fn saw it.
type term struct {
	holder     string
	token      uint64
	start, end time.Time
}

// ledger records terms and callbacks of several Runs.
type ledger struct {
	mu      sync.Mutex
	terms   []*term
	calls   []string
	leaders map[string][]string // observer -> "holder/token"
}

func (g *ledger) begin(holder string, token uint64) *term {
	g.mu.Lock()
	defer g.mu.Unlock()
	tm := &term{holder: holder, token: token, start: time.Now()}
	g.terms = append(g.terms, tm)
	return tm
}

func (g *ledger) finish(tm *term) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tm.end = time.Now()
}

func (g *ledger) call(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, fmt.Sprintf(format, args...))
}

func (g *ledger) observed(observer string, ld election.Leader) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leaders == nil {
		g.leaders = map[string][]string{}
	}
	g.leaders[observer] = append(g.leaders[observer], fmt.Sprintf("%s/%d", ld.Holder, ld.Token))
}

func (g *ledger) snapshot() []term {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]term, len(g.terms))
	for i, tm := range g.terms {
		out[i] = *tm
	}
	return out
}

// checkOneLeader fails unless the terms follow one another without
// overlap, with growing tokens.
func checkOneLeader(t *testing.T, terms []term) {
	t.Helper()
	for i := 1; i < len(terms); i++ {
		prev, cur := terms[i-1], terms[i]
		if prev.end.IsZero() || !prev.end.Before(cur.start) {
			t.Errorf("term of %s (token %d) from %s to %s overlaps the next, of %s from %s",
				prev.holder, prev.token, prev.start.Format(time.StampMilli), prev.end.Format(time.StampMilli),
				cur.holder, cur.start.Format(time.StampMilli))
		}
		if cur.token <= prev.token {
			t.Errorf("token %d of %s is not larger than %d of %s", cur.token, cur.holder, prev.token, prev.holder)
		}
	}
}

// runCandidate starts election.Run for holder in wg, recording in g.
func runCandidate(ctx context.Context, t *testing.T, wg *sync.WaitGroup, g *ledger, c election.Client, holder string, sess election.Config) {
	sess.Holder = holder
	cfg := election.RunConfig{
		Client:    c,
		Name:      "svc/leader",
		Session:   sess,
		OnStarted: func(l *election.Lease) { g.call("%s started %d", holder, l.Token()) },
		OnStopped: func(l *election.Lease) {
			g.call("%s stopped %d: lost %t", holder, l.Token(), errors.Is(l.Err(), election.ErrLost))
		},
		OnNewLeader: func(ld election.Leader) { g.observed(holder, ld) },
	}
	wg.Go(func() {
		err := election.Run(ctx, cfg, func(ctx context.Context, l *election.Lease) error {
			tm := g.begin(holder, l.Token())
			<-ctx.Done()
			g.finish(tm)
			return ctx.Err()
		})
		if err != nil {
			t.Errorf("Run of %s: %v", holder, err)
		}
	})
}

func TestRunFailsOverToTheOtherCandidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		ca, cb := f.client(), f.client()
		g := &ledger{}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		t0 := time.Now()
		runCandidate(ctx, t, &wg, g, ca, "a", election.Config{TTL: ttl})
		synctest.Wait()
		runCandidate(ctx, t, &wg, g, cb, "b", election.Config{TTL: ttl})

		sleepUntil(t0.Add(5 * time.Second))
		if terms := g.snapshot(); len(terms) != 1 || terms[0].holder != "a" || !terms[0].end.IsZero() {
			t.Fatalf("terms after 5s: %+v, want a leading", terms)
		}
		// a's renewal at 5s went through; then a is cut off.
		cutAt := time.Now()
		ca.setCut(true)
		sleepUntil(cutAt.Add(ttl + time.Second))
		terms := g.snapshot()
		if len(terms) != 2 || terms[1].holder != "b" {
			t.Fatalf("terms %+v, want b leading within TTL+1s of a being cut off", terms)
		}
		if got := terms[0].end.Sub(cutAt); got != safeFor {
			t.Errorf("a stepped down %s after its last renewal, want %s", got, safeFor)
		}
		if got := terms[1].start.Sub(cutAt); got != ttl {
			t.Errorf("b started leading %s after a's last renewal, want %s (the server's expiry)", got, ttl)
		}
		checkOneLeader(t, terms)

		cancel()
		wg.Wait()
		want := []string{"a started 1", "a stopped 1: lost true", "b started 2", "b stopped 2: lost false"}
		if !slices.Equal(g.calls, want) {
			t.Errorf("callbacks %q, want %q", g.calls, want)
		}
		for _, who := range []string{"a", "b"} {
			if got := g.leaders[who]; !slices.Equal(got, []string{"a/1", "b/2"}) {
				t.Errorf("%s observed leaders %q, want a/1, b/2", who, got)
			}
		}
		// b released when its Run ended.
		if _, err := f.m.Get("svc/leader"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("lease still held after both Runs ended: %v", err)
		}
	})
}

func TestRunAJobUnderALock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		var stopped error
		cfg := election.RunConfig{
			Client:    f.client(),
			Name:      "jobs/nightly",
			Session:   election.Config{TTL: ttl},
			OnStopped: func(l *election.Lease) { stopped = l.Err() },
		}
		ran := 0
		err := election.Run(t.Context(), cfg, func(ctx context.Context, l *election.Lease) error {
			ran++
			time.Sleep(10 * time.Second) // longer than the TTL: renewals keep it
			if _, err := l.Put(ctx, "jobs/nightly/done", []byte("yes")); err != nil {
				return err
			}
			return nil
		})
		if err != nil || ran != 1 {
			t.Fatalf("Run = %v after %d runs, want nil after one", err, ran)
		}
		if stopped != election.ErrReleased {
			t.Errorf("OnStopped saw %v, want ErrReleased", stopped)
		}
		if _, err := f.m.Get("jobs/nightly"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("lease still held after the job: %v", err)
		}
		if e, err := f.m.KVGet("jobs/nightly/done"); err != nil || string(e.Value) != "yes" {
			t.Errorf("the job's fenced write: %+v, %v", e, err)
		}

		boom := errors.New("boom")
		if err := election.Run(t.Context(), cfg, func(context.Context, *election.Lease) error { return boom }); err != boom {
			t.Errorf("Run = %v, want fn's error", err)
		}
	})
}

func TestRunStopsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(time.Minute)
			cancel()
		}()
		var cause error
		err := election.Run(ctx, election.RunConfig{Client: f.client(), Name: "svc/x", Session: election.Config{TTL: ttl}},
			func(ctx context.Context, l *election.Lease) error {
				<-ctx.Done()
				cause = context.Cause(ctx)
				return ctx.Err()
			})
		if err != nil {
			t.Errorf("Run = %v, want nil when its context ends", err)
		}
		if cause != context.Canceled {
			t.Errorf("fn's context ended with %v, want the parent's cancellation", cause)
		}
		if _, err := f.m.Get("svc/x"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("lease still held after Run returned: %v", err)
		}
	})
}

func TestRunValidates(t *testing.T) {
	fn := func(context.Context, *election.Lease) error { return nil }
	c := newFakeCluster().client()
	for _, tt := range []struct {
		cfg election.RunConfig
		fn  func(context.Context, *election.Lease) error
	}{
		{election.RunConfig{Name: "x"}, fn},
		{election.RunConfig{Client: c}, fn},
		{election.RunConfig{Client: c, Name: "x"}, nil},
		{election.RunConfig{Client: c, Name: "x", Session: election.Config{TTL: -1}}, fn},
	} {
		if err := election.Run(t.Context(), tt.cfg, tt.fn); err == nil {
			t.Errorf("Run(%+v) accepted it", tt.cfg)
		}
	}
}
