package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// Tests against in-process clusters: real nodes, servers and clients on
// loopback, in real time.

func TestCutOffHolderStepsDownBeforeTheNextGrant(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	ca, cut := mustClient(t, c.Endpoints())
	cb, _ := mustClient(t, c.Endpoints())
	const ttl = 2 * time.Second
	s, err := election.New(ca, election.Config{Holder: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Orphan()
	ctx := within(t, 20*time.Second)
	l, err := s.TryAcquire(ctx, "jobs/x")
	if err != nil {
		t.Fatalf("a: TryAcquire: %v", err)
	}
	steppedDown := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		steppedDown <- time.Now()
	}()

	cut.setCut(true)
	cutAt := time.Now()
	// b asks every few milliseconds; the send time of the attempt that
	// is granted is a lower bound of the grant's time on the server.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var granted client.Lease
	for {
		granted, err = cb.Acquire(ctx, "jobs/x", "b", ttl)
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrLeaseHeld) {
			t.Fatalf("b: Acquire: %v", err)
		}
		<-tick.C
	}
	var lostAt time.Time
	select {
	case lostAt = <-steppedDown:
	default:
		t.Fatalf("b was granted the lease while a's context was still live (state %s)", l.State())
	}
	t.Logf("a cut off %s after its last renewal; a stepped down %s later; b's granted request was sent %s after that",
		cutAt.Sub(l.LastRenewal()).Round(time.Millisecond), lostAt.Sub(cutAt).Round(time.Millisecond),
		granted.Sent.Sub(lostAt).Round(time.Millisecond))
	if !lostAt.Before(granted.Sent) {
		t.Fatalf("a stepped down at %s, not before b's granted request was sent at %s", lostAt, granted.Sent)
	}
	if !errors.Is(l.Err(), election.ErrLost) || granted.Token <= l.Token() {
		t.Fatalf("a: %v, token %d; b's token %d", l.Err(), l.Token(), granted.Token)
	}
	// a's late write is refused even once its network is back.
	cut.setCut(false)
	if _, err := ca.Put(ctx, "jobs/x/data", []byte("late"), "jobs/x", l.Token()); !errors.Is(err, client.ErrStaleToken) {
		t.Errorf("a's late write: %v, want stale", err)
	}
}

func TestLeaderFailoverKeepsTheLease(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{Size: 3})
	cl, _ := mustClient(t, c.Endpoints())
	// A TTL far longer than a failover, even on a loaded machine where
	// the quick raft timing can take a few rounds to settle: the test is
	// about the lease surviving a failover, not about how fast it is.
	s, err := election.New(cl, election.Config{Holder: "a", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := within(t, 40*time.Second)
	l, err := s.TryAcquire(ctx, "jobs/x")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if _, err := l.Put(ctx, "jobs/x/data", []byte("v1")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	states := make(chan election.State, 100)
	go func() {
		for {
			ch := l.Changed()
			states <- l.State()
			select {
			case <-ch:
			case <-l.Done():
				states <- l.State()
				close(states)
				return
			}
		}
	}()

	old := c.Leader()
	crashAt := time.Now()
	c.Crash(old)
	leader := c.Leader()
	t.Logf("%s crashed; %s leads %s later", old.ID, leader.ID, time.Since(crashAt).Round(time.Millisecond))
	// Two renewals through the new leader.
	for l.LastRenewal().Before(crashAt.Add(2 * time.Second)) {
		select {
		case <-l.Changed():
		case <-l.Done():
			t.Fatalf("lease ended during the failover: %v", l.Err())
		case <-ctx.Done():
			t.Fatalf("no renewal after the failover; state %s, err %v", l.State(), l.Err())
		}
	}
	if l.State() != election.Held || l.Ctx().Err() != nil {
		t.Fatalf("state %s (err %v) after the failover, want held", l.State(), l.Err())
	}
	got, err := cl.Get(ctx, "jobs/x")
	if err != nil || got.Token != l.Token() || got.Holder != "a" {
		t.Fatalf("the cluster has %+v (%v), want a's grant with token %d", got, err, l.Token())
	}
	if _, err := l.Put(ctx, "jobs/x/data", []byte("v2")); err != nil {
		t.Fatalf("Put after the failover: %v", err)
	}
	if kv, err := cl.KVGet(ctx, "jobs/x/data"); err != nil || string(kv.Value) != "v2" || kv.Token != l.Token() {
		t.Fatalf("KVGet = %+v, %v", kv, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var seen []string
	for st := range states {
		if len(seen) == 0 || seen[len(seen)-1] != st.String() {
			seen = append(seen, st.String())
		}
	}
	t.Logf("states during the failover: %q", seen)
	if slices.Contains(seen, election.Lost.String()) {
		t.Errorf("the lease was lost during the failover: %q", seen)
	}
}

func TestObserveSeesEveryLeader(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	cl, _ := mustClient(t, c.Endpoints())
	ctx := within(t, 20*time.Second)
	const ttl = time.Second
	session := func(holder string) *election.Session {
		s, err := election.New(cl, election.Config{Holder: holder, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Orphan)
		return s
	}

	// A leader before the observer starts is reported first.
	a, err := session("a").Campaign(ctx, "svc/x")
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	leaders, err := election.Observe(octx, cl, "svc/x")
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	defer stop()
	want := []election.Leader{{Name: "svc/x", Holder: "a", Token: a.Token()}}
	// A longer name under the same prefix is not a leader of svc/x.
	if _, err := session("other").Campaign(ctx, "svc/xy"); err != nil {
		t.Fatal(err)
	}
	// Released, taken by b; b's session stops renewing, so c gets it
	// after it expires; d takes over from c.
	b := session("b")
	bDone := make(chan *election.Lease)
	go func() {
		l, err := b.Campaign(ctx, "svc/x")
		if err != nil {
			t.Error(err)
		}
		bDone <- l
	}()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	bl := <-bDone
	want = append(want, election.Leader{Name: "svc/x", Holder: "b", Token: bl.Token()})
	b.Orphan()
	cs := session("c")
	clead, err := cs.Campaign(ctx, "svc/x")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, election.Leader{Name: "svc/x", Holder: "c", Token: clead.Token()})
	ds := session("d")
	dDone := make(chan *election.Lease)
	go func() {
		l, err := ds.Campaign(ctx, "svc/x")
		if err != nil {
			t.Error(err)
		}
		dDone <- l
	}()
	if err := cs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dl := <-dDone
	want = append(want, election.Leader{Name: "svc/x", Holder: "d", Token: dl.Token()})
	ds.Close(ctx)

	// Observe delivers them in order (it has buffered them meanwhile);
	// once d's grant is in, nothing else follows.
	var got []election.Leader
	timeout := time.After(5 * time.Second)
collect:
	for len(got) < len(want) {
		select {
		case ld := <-leaders:
			got = append(got, ld)
		case <-timeout:
			break collect
		}
	}
	stop()
	for ld := range leaders {
		got = append(got, ld)
	}
	if !slices.Equal(got, want) {
		t.Errorf("observed\n%+v\nwant\n%+v", got, want)
	}
}

func TestRunTwoCandidatesOnACluster(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	ca, cutA := mustClient(t, c.Endpoints())
	cb, cutB := mustClient(t, c.Endpoints())
	cuts := map[string]*cutTransport{"a": cutA, "b": cutB}
	const ttl = time.Second
	g := &ledger{}
	ctx, cancel := context.WithCancel(within(t, 30*time.Second))
	var wg sync.WaitGroup
	runCandidate(ctx, t, &wg, g, ca, "a", election.Config{TTL: ttl})
	runCandidate(ctx, t, &wg, g, cb, "b", election.Config{TTL: ttl})

	waitTerms := func(n int) (terms []term) {
		t.Helper()
		testcluster.Eventually(t, fmt.Sprintf("%d terms of leadership", n), 10*time.Second, func() error {
			if terms = g.snapshot(); len(terms) < n {
				return fmt.Errorf("have %+v", terms)
			}
			return nil
		})
		return terms
	}
	for round := 1; round <= 2; round++ {
		terms := waitTerms(round)
		leader := terms[round-1]
		cutAt := time.Now()
		cuts[leader.holder].setCut(true)
		next := waitTerms(round + 1)[round]
		t.Logf("round %d: %s (token %d) cut off; %s leads %s later with token %d", round,
			leader.holder, leader.token, next.holder, next.start.Sub(cutAt).Round(time.Millisecond), next.token)
		if next.holder == leader.holder {
			t.Fatalf("the cut-off holder %s leads again", leader.holder)
		}
		if d := next.start.Sub(cutAt); d > ttl+time.Second {
			t.Errorf("%s took %s to lead after %s was cut off, want at most TTL+1s", next.holder, d, leader.holder)
		}
		cuts[leader.holder].setCut(false)
	}
	cancel()
	wg.Wait()
	terms := g.snapshot()
	checkOneLeader(t, terms)
	for _, tm := range terms {
		if tm.end.IsZero() {
			t.Errorf("term %+v never ended", tm)
		}
	}
	t.Log(fmt.Sprint(g.calls))
}

// TestRevokedLeaderStepsDown: an operator revokes the leader's grant; the
// leader learns it at its next renewal, steps down and reports why; the
// next candidate leads with a larger token, and because the lock-delay
// is the TTL, only after the old leader stepped down.
func TestRevokedLeaderStepsDown(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	ca, _ := mustClient(t, c.Endpoints())
	cb, _ := mustClient(t, c.Endpoints())
	ops, _ := mustClient(t, c.Endpoints())
	const ttl = 3 * time.Second
	ctx := within(t, 30*time.Second)
	sa, err := election.New(ca, election.Config{Holder: "a", TTL: ttl, LockDelay: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close(context.Background())
	la, err := sa.Campaign(ctx, "svc/x")
	if err != nil {
		t.Fatal(err)
	}
	if g, err := ops.Get(ctx, "svc/x"); err != nil || g.LockDelay != ttl {
		t.Fatalf("a's grant: %+v, %v; want lock-delay %s", g, err, ttl)
	}
	aDone := make(chan time.Time, 1)
	go func() {
		<-la.Done()
		aDone <- time.Now()
	}()
	sb, err := election.New(cb, election.Config{Holder: "b", TTL: ttl, LockDelay: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	type term struct {
		l     *election.Lease
		err   error
		start time.Time
	}
	bLeads := make(chan term, 1)
	go func() {
		l, err := sb.Campaign(ctx, "svc/x")
		bLeads <- term{l, err, time.Now()}
	}()

	revoked, err := ops.Revoke(ctx, "svc/x", 0, "moving to a new host")
	if err != nil || len(revoked) != 1 || revoked[0].Holder != "a" || revoked[0].Token != la.Token() {
		t.Fatalf("Revoke: %+v, %v; want a's grant %d", revoked, err, la.Token())
	}
	revokedAt := time.Now()
	var stepped time.Time
	select {
	case stepped = <-aDone:
	case <-ctx.Done():
		t.Fatalf("a did not step down (state %s)", la.State())
	}
	// At its next renewal, not at its deadline: the server said why.
	if !stepped.Before(la.Deadline()) {
		t.Errorf("a stepped down at its deadline (%s after the revoke), not at its next renewal", stepped.Sub(revokedAt))
	}
	err = la.Err()
	var lost *election.LostError
	var re *client.RevokedError
	if !errors.Is(err, election.ErrLost) || !errors.Is(err, client.ErrRevoked) || !errors.As(err, &lost) || !errors.As(err, &re) ||
		re.Reason != "moving to a new host" || re.Token != la.Token() || lost.Reason != "revoked by an operator (moving to a new host)" {
		t.Fatalf("a's end: %v", err)
	}
	if cause := context.Cause(la.Ctx()); !errors.Is(cause, client.ErrRevoked) {
		t.Errorf("the cause of a's context: %v", cause)
	}
	// The old token fences nothing.
	if _, err := ca.Put(ctx, "svc/x/data", []byte("late"), "svc/x", la.Token()); !errors.Is(err, client.ErrStaleToken) {
		t.Errorf("a's write with the revoked token: %v", err)
	}
	bt := <-bLeads
	if bt.err != nil {
		t.Fatal(bt.err)
	}
	if bt.l.Token() <= la.Token() || !stepped.Before(bt.start) {
		t.Fatalf("b leads with token %d at %s; a had %d and stepped down at %s", bt.l.Token(), bt.start, la.Token(), stepped)
	}
	t.Logf("a stepped down %s after the revoke; b leads %s after it", stepped.Sub(revokedAt), bt.start.Sub(revokedAt))

	// Revoking a name nobody holds changes nothing.
	if _, err := ops.Revoke(ctx, "svc/none", 0, "r"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Revoke of a name not held: %v", err)
	}
	if _, err := ops.Revoke(ctx, "svc/x", 0, ""); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Revoke without a reason: %v", err)
	}
	if l, err := ops.Get(ctx, "svc/x"); err != nil || l.Token != bt.l.Token() {
		t.Errorf("after the refused revokes: %+v, %v", l, err)
	}
}
