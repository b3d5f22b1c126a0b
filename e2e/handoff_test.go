package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

// termLog is one term of leadership as a candidate's callbacks saw it:
// OnStarted, and the end of the lease's context.
type termLog struct {
	holder  string
	token   uint64
	started time.Time
	ended   time.Time // zero while it lasts
	cause   error
	ctx     context.Context
	endedCh chan struct{} // closed once ended is set
	// overlap names a term whose context had not ended when this one
	// started.
	overlap string
}

// candidates runs election.Run for each holder on name, each with its
// own client and session, and reports every start of a term. A leader
// hands its term off when told on its channel (the candidate to hand to,
// "" for the first in line).
type candidates struct {
	t       *testing.T
	mu      sync.Mutex
	terms   []*termLog
	started chan *termLog
	handoff map[string]chan string
	errs    chan error
}

func startCandidates(t *testing.T, ctx context.Context, api, name string, ttl time.Duration, holders ...string) *candidates {
	t.Helper()
	c := &candidates{t: t, started: make(chan *termLog, 1000), handoff: map[string]chan string{}, errs: make(chan error, 1000)}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for _, h := range holders {
		c.handoff[h] = make(chan string, 1)
		cl := newClient(t, "", api)
		cfg := election.RunConfig{
			Client:  cl,
			Name:    name,
			Session: election.Config{Holder: h, TTL: ttl},
			OnStarted: func(l *election.Lease) {
				tl := &termLog{holder: h, token: l.Token(), started: time.Now(), ctx: l.Ctx(), endedCh: make(chan struct{})}
				// The moment the term's context ended, as the library's
				// callback (context.AfterFunc) sees it.
				context.AfterFunc(l.Ctx(), func() {
					c.mu.Lock()
					tl.ended, tl.cause = time.Now(), context.Cause(l.Ctx())
					c.mu.Unlock()
					close(tl.endedCh)
				})
				c.mu.Lock()
				for _, o := range c.terms {
					if o.ctx.Err() == nil {
						tl.overlap = fmt.Sprintf("%s (token %d)", o.holder, o.token)
					}
				}
				c.terms = append(c.terms, tl)
				c.mu.Unlock()
				c.started <- tl
			},
		}
		wg.Go(func() {
			err := election.Run(ctx, cfg, func(ctx context.Context, l *election.Lease) error {
				select {
				case <-ctx.Done():
					return nil
				case to := <-c.handoff[h]:
					if _, err := l.Handoff(context.WithoutCancel(ctx), to); err != nil {
						c.errs <- fmt.Errorf("%s hands off to %q: %w", h, to, err)
					}
					return nil
				}
			})
			if err != nil {
				c.errs <- fmt.Errorf("%s: Run: %w", h, err)
			}
		})
	}
	return c
}

// next waits for the start of the next term.
func (c *candidates) next(what string) *termLog {
	c.t.Helper()
	select {
	case tl := <-c.started:
		return tl
	case err := <-c.errs:
		c.t.Fatalf("waiting for %s: %v", what, err)
	case <-time.After(30 * time.Second):
		c.t.Fatalf("no new term within 30s: %s", what)
	}
	return nil
}

// TestElectionHandoffs: three candidates on one name (election.Run,
// real tenured), 100 handoffs, alternately to the first in line and to a
// named candidate. Each new term starts within 100ms of the old one's
// end and never before it: by the library's callbacks (the old leader's
// context ended before the new leader's OnStarted) and by the server's
// history (each handed-off term ends at the cluster time the next one
// starts, with a larger token).
func TestElectionHandoffs(t *testing.T) {
	s := newServer(t, "n1", "", "--election-timeout", "200ms", "--history-terms", "200")
	s.start()
	s.waitReady(20 * time.Second)
	const name = "svc/handoff"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holders := []string{"c1", "c2", "c3"}
	c := startCandidates(t, ctx, s.api, name, 5*time.Second, holders...)

	const handoffs = 100
	cur := c.next("the first leader")
	var prev string
	var gaps []time.Duration
	for i := range handoffs {
		var to string
		var others []string
		for _, h := range holders {
			if h != cur.holder {
				others = append(others, h)
			}
		}
		// Both others wait: the one that led before cur re-queued when
		// its term was handed off.
		for _, h := range others {
			waitQueued(t, s, name, h)
		}
		if i%2 == 1 {
			// A named candidate: the one that did not lead last.
			to = others[0]
			if to == prev {
				to = others[1]
			}
		}
		c.handoff[cur.holder] <- to
		next := c.next(fmt.Sprintf("the term after handoff %d of %s (token %d) to %q", i, cur.holder, cur.token, to))
		if to != "" && next.holder != to {
			t.Fatalf("handoff %d to %s: %s leads", i, to, next.holder)
		}
		if next.holder == cur.holder || next.token <= cur.token {
			t.Fatalf("handoff %d: %s (token %d) followed %s (token %d)", i, next.holder, next.token, cur.holder, cur.token)
		}
		if next.overlap != "" {
			t.Fatalf("handoff %d: %s started (token %d) while the context of %s had not ended", i, next.holder, next.token, next.overlap)
		}
		select {
		case <-cur.endedCh:
		case <-time.After(10 * time.Second):
			t.Fatalf("handoff %d: the callback of %s's context end (token %d) did not run", i, cur.holder, cur.token)
		}
		c.mu.Lock()
		ended, cause := cur.ended, cur.cause
		c.mu.Unlock()
		switch {
		case !errors.Is(cause, election.ErrHandedOff):
			t.Fatalf("handoff %d: %s's term ended with %v, want ErrHandedOff", i, cur.holder, cause)
		}
		gap := next.started.Sub(ended)
		gaps = append(gaps, gap)
		if gap > 100*time.Millisecond {
			t.Errorf("handoff %d: %s started %s after %s's term ended, want within 100ms", i, next.holder, gap, cur.holder)
		}
		prev, cur = cur.holder, next
	}
	slices.Sort(gaps)
	t.Logf("%d handoffs; from the old term's end to the new one's start: median %s, max %s", handoffs, gaps[len(gaps)/2], gaps[len(gaps)-1])

	// The server's history: each handed-off term ends when the next
	// starts, in cluster time, and the next has a larger token.
	cl := newClient(t, "", s.api)
	terms, err := cl.History(context.Background(), name, client.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(terms) // oldest first
	if len(terms) != handoffs+1 {
		t.Fatalf("history has %d terms, want %d", len(terms), handoffs+1)
	}
	for i, tm := range terms[:handoffs] {
		nx := terms[i+1]
		if tm.Ending != client.EndingHandedOff || tm.ClusterEnd != nx.ClusterStart || nx.Token <= tm.Token ||
			tm.ClusterEnd <= tm.ClusterStart {
			t.Fatalf("term %d: %+v then %+v: want handed_off, ending when the next starts, with a larger token", i, tm, nx)
		}
	}
	if last := terms[handoffs]; !last.Held() || last.Token != cur.token || last.Holder != cur.holder {
		t.Fatalf("last term %+v, want held by %s with token %d", last, cur.holder, cur.token)
	}
	c.mu.Lock()
	n := len(c.terms)
	c.mu.Unlock()
	if n != handoffs+1 {
		t.Fatalf("the callbacks saw %d terms, want %d", n, handoffs+1)
	}
	select {
	case err := <-c.errs:
		t.Fatal(err)
	default:
	}
}

// TestElectionPriorityHandoff: a candidate with a higher priority asks the
// leader to hand over, and the leader does at its next renewal; one with
// the same priority does not.
func TestElectionPriorityHandoff(t *testing.T) {
	s := startSingle(t)
	const name = "svc/prio"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 3 * time.Second
	sess := func(holder string, prio int) *election.Session {
		t.Helper()
		se, err := election.New(newClient(t, "", s.api), election.Config{Holder: holder, TTL: ttl, Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { se.Close(context.Background()) })
		return se
	}
	low := sess("low", 1)
	l, err := low.Campaign(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	same := sess("same", 1)
	sameDone := make(chan error, 1)
	go func() {
		_, err := same.Campaign(ctx, name)
		sameDone <- err
	}()
	waitQueued(t, s, name, "same")
	high := sess("high", 5)
	type res struct {
		l   *election.Lease
		err error
	}
	highDone := make(chan res, 1)
	go func() {
		hl, err := high.Campaign(ctx, name)
		highDone <- res{hl, err}
	}()
	var got res
	select {
	case got = <-highDone:
	case <-time.After(2 * ttl):
		t.Fatalf("high did not lead within %s", 2*ttl)
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("high leads while low's context has not ended")
	}
	if !errors.Is(l.Err(), election.ErrHandedOff) || got.l.Token() <= l.Token() {
		t.Fatalf("low ended with %v (token %d); high leads with token %d", l.Err(), l.Token(), got.l.Token())
	}
	// same (priority 1, queued first) waits on; high's 5 is not asked to
	// hand over by it.
	select {
	case err := <-sameDone:
		t.Fatalf("same's campaign returned: %v", err)
	default:
	}
	// The history, oldest first: low's term handed off, ending when
	// high's starts.
	h := history(t, s, name)
	if len(h.Terms) != 2 || h.Terms[0].Holder != "low" || h.Terms[0].Ended != "handed_off" || h.Terms[0].End != h.Terms[1].Start ||
		h.Terms[1].Holder != "high" || h.Terms[1].Ended != "" {
		t.Fatalf("history %+v", h)
	}
}

// TestHandoffFromTheCLI: tenure handoff hands a grant from tenure acquire
// to a named waiting candidate, or to the first in line; refusals change
// nothing; SIGUSR1 makes a leading tenure elect hand off and exit 0.
func TestHandoffFromTheCLI(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	a := acquireJSON(t, ep, "jobs/ho", "--holder", "a", "--ttl", "30s")
	tok := fmt.Sprint(a.Token)
	b := startCLI(t, ep, "acquire", "jobs/ho", "--holder", "b", "--wait", "--timeout", "30s", "-o", "json")
	cw := startCLI(t, ep, "acquire", "jobs/ho", "--holder", "c", "--wait", "--timeout", "30s", "-o", "json")
	waitQueued(t, s, "jobs/ho", "b")
	waitQueued(t, s, "jobs/ho", "c")

	r := cli(t, ep, "handoff", "jobs/ho", "--token", tok, "--to", "nobody")
	mustCode(t, 6, r, "handoff to a holder that is not waiting")
	if !strings.Contains(r.stderr, `"nobody" is not waiting`) {
		t.Fatalf("stderr %q", r.stderr)
	}
	mustCode(t, 4, cli(t, ep, "handoff", "jobs/ho", "--token", fmt.Sprint(a.Token+100), "--to", "c"), "handoff with a stale token")
	mustCode(t, 2, cli(t, ep, "handoff", "jobs/ho", "--to", "c"), "handoff without a token")
	if g := acquireJSON(t, ep, "jobs/ho", "--holder", "a", "--ttl", "30s"); g.Token != a.Token {
		t.Fatalf("after refused handoffs a holds token %d, want %d", g.Token, a.Token)
	}

	watch := startCLI(t, ep, "watch", "jobs/ho")
	watch.line("the watch's current state")
	watch.line("the watch's synced")
	r = cli(t, ep, "handoff", "jobs/ho", "--token", tok, "--to", "c", "-o", "json")
	mustCode(t, 0, r, "handoff to c")
	// Watchers see a release marked handed_off, then c's grant.
	if l := watch.line("the release"); !strings.Contains(l, "released") || !strings.Contains(l, `reason="handed_off"`) {
		t.Fatalf("watch printed %q", l)
	}
	if l := watch.line("the grant"); !strings.Contains(l, "granted") || !strings.Contains(l, "holder=c") {
		t.Fatalf("watch printed %q", l)
	}
	if !strings.Contains(r.stdout, `"handed_to":"c"`) {
		t.Fatalf("handoff printed %q", r.stdout)
	}
	cLine := cw.line("c's grant")
	if !strings.Contains(cLine, `"holder":"c"`) {
		t.Fatalf("c's acquire printed %q", cLine)
	}
	// The history, oldest first: a's term handed off, ending when c's
	// starts; b still waits.
	h := history(t, s, "jobs/ho")
	if len(h.Terms) != 2 || h.Terms[0].Holder != "a" || h.Terms[0].Ended != "handed_off" || h.Terms[0].End != h.Terms[1].Start ||
		h.Terms[1].Holder != "c" || !slices.Equal(h.Waiters, []string{"b"}) {
		t.Fatalf("history after the handoff: %+v", h)
	}
	// To the first in line: b.
	cTok := decode[jsonLease](t, strings.TrimSpace(cLine)).Token
	r = cli(t, ep, "handoff", "jobs/ho", "--token", fmt.Sprint(cTok))
	mustCode(t, 0, r, "handoff to the first in line")
	if !strings.Contains(r.stdout, "to b, token") {
		t.Fatalf("handoff printed %q", r.stdout)
	}
	if l := b.line("b's grant"); !strings.Contains(l, `"holder":"b"`) {
		t.Fatalf("b's acquire printed %q", l)
	}
	mustCode(t, 6, cli(t, ep, "handoff", "jobs/ho", "--token", fmt.Sprint(cTok+1)), "handoff with nobody waiting")

	// tenure elect: SIGUSR1 hands off to the next in line.
	e1 := startCLI(t, ep, "elect", "svc/ho", "e1", "--ttl", "5s")
	if l := e1.line("e1 to lead"); !strings.Contains(l, "leading svc/ho as e1") {
		t.Fatalf("e1 printed %q", l)
	}
	e2 := startCLI(t, ep, "elect", "svc/ho", "e2", "--ttl", "5s", "--priority", "0")
	waitQueued(t, s, "svc/ho", "e2")
	if code := e1.stop(syscall.SIGUSR1); code != 0 {
		t.Fatalf("e1 exited %d after SIGUSR1; stderr %q", code, e1.errb.String())
	}
	if l := e1.line("e1's handoff"); !strings.Contains(l, "handed svc/ho") || !strings.Contains(l, "to e2") {
		t.Fatalf("e1 printed %q", l)
	}
	if l := e2.line("e2 to lead"); !strings.Contains(l, "leading svc/ho as e2") {
		t.Fatalf("e2 printed %q", l)
	}
	mustCode(t, 2, cli(t, ep, "elect", "svc/ho", "e3", "--priority", "-1"), "elect --priority -1")
	// A candidate of a higher priority asks e2 (priority 0) to hand over:
	// e2 does at its next renewal and exits 0.
	e3 := startCLI(t, ep, "elect", "svc/ho", "e3", "--ttl", "3s", "--priority", "5")
	if l := e3.line("e3 to lead"); !strings.Contains(l, "leading svc/ho as e3") {
		t.Fatalf("e3 printed %q", l)
	}
	if l := e2.line("e2's handoff"); !strings.Contains(l, "handed svc/ho") || !strings.Contains(l, "higher priority") {
		t.Fatalf("e2 printed %q", l)
	}
	select {
	case <-e2.done:
		if e2.code != 0 {
			t.Fatalf("e2 exited %d after handing off; stderr %q", e2.code, e2.errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("e2 did not exit after handing off")
	}
}
