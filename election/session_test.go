package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

// The tests in this file run in synctest bubbles: time.Now and timers are
// fake and advance only when every goroutine of the bubble is blocked, so
// the timing is exact and a 30-second scenario takes no time.

const ttl = 3 * time.Second

// With TTL 3s and the defaults: renewals every 1s, an attempt times out
// after 500ms, and the local deadline is 3s*0.99 - 300ms = 2.67s after the
// send time of the last successful renewal.
const (
	renewEvery = time.Second
	renewLimit = 500 * time.Millisecond
	safeFor    = 2670 * time.Millisecond
)

func mustSession(t *testing.T, c election.Client, holder string) *election.Session {
	t.Helper()
	s, err := election.New(c, election.Config{Holder: holder, TTL: ttl})
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	t.Cleanup(s.Orphan)
	return s
}

func mustTry(t *testing.T, s *election.Session, name string) *election.Lease {
	t.Helper()
	l, err := s.TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatalf("TryAcquire %s: %v", name, err)
	}
	return l
}

// sleepUntil advances the bubble's clock to at and lets every goroutine
// settle.
func sleepUntil(at time.Time) {
	time.Sleep(time.Until(at))
	synctest.Wait()
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg     election.Config
		wantErr string
	}{
		{election.Config{}, ""},
		{election.DefaultConfig(), ""},
		{election.Config{TTL: -time.Second}, "TTL must be positive"},
		{election.Config{Drift: 0.5}, "Drift must be in"},
		{election.Config{Margin: -1}, "must not be negative"},
		{election.Config{TTL: 3 * time.Second, RenewInterval: 2700 * time.Millisecond}, "RenewInterval 2.7s is not shorter than the 2.67s"},
		{election.Config{TTL: 3 * time.Second, Margin: 3 * time.Second}, "not shorter"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.cfg), func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := election.New(nil, election.Config{}); err == nil {
		t.Error("New accepted a nil client")
	}
}

func TestDefaultHolderIsUnique(t *testing.T) {
	a, b := election.DefaultHolder(), election.DefaultHolder()
	if a == b || !strings.Contains(a, "-") {
		t.Errorf("DefaultHolder = %q, %q; want two different names", a, b)
	}
}

func TestRenewsAllLeasesTogetherEveryThirdOfTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		s := mustSession(t, f.client(), "a")
		t0 := time.Now()
		x := mustTry(t, s, "jobs/x")
		if got := x.Deadline().Sub(t0); got != safeFor {
			t.Fatalf("deadline %s after the send time, want %s", got, safeFor)
		}
		sleepUntil(t0.Add(400 * time.Millisecond))
		y := mustTry(t, s, "jobs/y")

		sleepUntil(t0.Add(3500 * time.Millisecond))
		want := []string{"00:00:01.000 jobs/x,jobs/y", "00:00:02.000 jobs/x,jobs/y", "00:00:03.000 jobs/x,jobs/y"}
		var got []string
		for _, c := range f.renewCalls() {
			got = append(got, c.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("renewals (one request for both leases, every 1s):\n got %q\nwant %q", got, want)
		}
		for _, l := range []*election.Lease{x, y} {
			if l.State() != election.Held || l.Err() != nil || l.Ctx().Err() != nil {
				t.Errorf("%s: state %s, err %v, ctx %v; want held", l.Name(), l.State(), l.Err(), l.Ctx().Err())
			}
			if want := t0.Add(3 * time.Second); !l.LastRenewal().Equal(want) {
				t.Errorf("%s: last renewal sent at %s, want %s", l.Name(), l.LastRenewal(), want)
			}
			if want := t0.Add(3*time.Second + safeFor); !l.Deadline().Equal(want) {
				t.Errorf("%s: deadline %s, want %s", l.Name(), l.Deadline(), want)
			}
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}

// Renewals come due on a grid of ticks (100ms, or a tenth of the renewal
// interval if shorter), so that sessions sharing a client renew at the
// same instant and the client can send their renewals together.
func TestRenewalsOfSessionsAlignToTheGrid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		c := f.client()
		t0 := time.Now() // the bubble starts on a whole second
		a, b, d := mustSession(t, c, "a"), mustSession(t, c, "b"), mustSession(t, c, "d")
		sleepUntil(t0.Add(30 * time.Millisecond))
		mustTry(t, a, "jobs/a")
		sleepUntil(t0.Add(70 * time.Millisecond))
		mustTry(t, b, "jobs/b")
		sleepUntil(t0.Add(130 * time.Millisecond))
		late := mustTry(t, d, "jobs/d")

		sleepUntil(t0.Add(1500 * time.Millisecond))
		var got []string
		for _, c := range f.renewCalls() {
			got = append(got, c.String())
		}
		slices.Sort(got)
		want := []string{"00:00:01.000 jobs/a", "00:00:01.000 jobs/b", "00:00:01.100 jobs/d"}
		if !slices.Equal(got, want) {
			t.Errorf("renewals due at 1.030, 1.070 and 1.130:\n got %q\nwant %q", got, want)
		}
		if want := t0.Add(1100*time.Millisecond + safeFor); !late.Deadline().Equal(want) {
			t.Errorf("deadline after the early renewal: %s, want %s (its send time + %s)", late.Deadline(), want, safeFor)
		}
	})
}

func TestAtRiskThenHeldAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		c := f.client()
		s := mustSession(t, c, "a")
		t0 := time.Now()
		l := mustTry(t, s, "jobs/x")
		changed := l.Changed()
		c.setCut(true)

		// The renewal at 1s hangs and times out at 1.5s.
		sleepUntil(t0.Add(renewEvery + renewLimit - time.Millisecond))
		if st := l.State(); st != election.Held {
			t.Fatalf("state %s while the first renewal is in flight, want held", st)
		}
		sleepUntil(t0.Add(renewEvery + renewLimit))
		if st := l.State(); st != election.AtRisk || !errors.Is(l.Err(), client.ErrUnavailable) {
			t.Fatalf("state %s (err %v) after a failed renewal, want at risk", st, l.Err())
		}
		select {
		case <-changed:
		default:
			t.Fatal("Changed not signalled when the lease turned at risk")
		}
		if l.Ctx().Err() != nil {
			t.Fatal("context ended while the lease is only at risk")
		}

		// Retries go on; once the network heals, one succeeds.
		sleepUntil(t0.Add(2 * time.Second))
		c.setCut(false)
		sleepUntil(t0.Add(2*time.Second + renewLimit + 10*time.Millisecond))
		if st := l.State(); st != election.Held || l.Err() != nil {
			t.Fatalf("state %s (err %v) after the network healed, want held", st, l.Err())
		}
		if got := l.Deadline().Sub(l.LastRenewal()); got != safeFor || !l.LastRenewal().After(t0.Add(2*time.Second)) {
			t.Errorf("renewed at %s with deadline %s after it; want after 2s and %s",
				l.LastRenewal().Sub(t0), got, safeFor)
		}
		if l.Ctx().Err() != nil {
			t.Fatal("context ended although the lease was renewed in time")
		}
	})
}

func TestLostBeforeTheServerCanRegrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		a := f.client()
		s := mustSession(t, a, "a")
		t0 := time.Now()
		l := mustTry(t, s, "jobs/x")
		deadline := l.Deadline()
		a.setCut(true)

		// b waits for the lease on the server meanwhile.
		b := mustSession(t, f.client(), "b")
		granted := make(chan *election.Lease)
		go func() {
			bl, err := b.Acquire(context.Background(), "jobs/x")
			if err != nil {
				t.Errorf("b: Acquire: %v", err)
			}
			granted <- bl
		}()

		<-l.Done()
		lostAt := time.Now()
		if lostAt.After(deadline) || !lostAt.Before(t0.Add(ttl)) {
			t.Fatalf("context ended at %s; want by the deadline %s, before the server's expiry at %s",
				lostAt.Sub(t0), deadline.Sub(t0), ttl)
		}
		if st := l.State(); st != election.Lost {
			t.Errorf("state %s, want lost", st)
		}
		cause := context.Cause(l.Ctx())
		var lost *election.LostError
		if !errors.Is(cause, election.ErrLost) || !errors.As(cause, &lost) || lost.Name != "jobs/x" {
			t.Fatalf("cause %v, want a *LostError for jobs/x", cause)
		}
		if !strings.Contains(cause.Error(), "no renewal confirmed within 2.67s") || !errors.Is(l.Err(), election.ErrLost) {
			t.Errorf("cause %q, Err %v", cause, l.Err())
		}
		if _, err := l.Put(t.Context(), "k", []byte("v")); !errors.Is(err, election.ErrLost) {
			t.Errorf("Put after the loss = %v, want ErrLost without a request", err)
		}
		// The server still had the lease when a's context ended.
		if _, err := f.client().Acquire(t.Context(), "jobs/x", "c", ttl); !errors.Is(err, client.ErrLeaseHeld) {
			t.Fatalf("acquire by c when a stepped down: %v, want held", err)
		}

		bl := <-granted
		grantedAt := time.Now()
		if gap := grantedAt.Sub(lostAt); gap < 300*time.Millisecond {
			t.Errorf("b was granted %s after a stepped down, want at least the margin", gap)
		}
		if bl.Token() <= l.Token() {
			t.Errorf("b's token %d is not larger than a's %d", bl.Token(), l.Token())
		}
		// a's late write is refused by the server too.
		if _, err := f.client().Put(t.Context(), "k", []byte("late"), "jobs/x", l.Token()); !errors.Is(err, client.ErrStaleToken) {
			t.Errorf("a's late fenced write: %v, want stale", err)
		}
		b.Close(t.Context())
	})
}

func TestLostAtOnceWhenTheServerSaysStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		s := mustSession(t, f.client(), "a")
		t0 := time.Now()
		l := mustTry(t, s, "jobs/x")
		// An operator releases the lease behind the holder's back.
		if err := f.m.Release("jobs/x", l.Token()); err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		if at := time.Since(t0); at != renewEvery {
			t.Errorf("lost %s after the grant, want at the next renewal (%s)", at, renewEvery)
		}
		if err := l.Err(); !errors.Is(err, election.ErrLost) || !errors.Is(err, client.ErrStaleToken) {
			t.Errorf("Err = %v, want ErrLost and ErrStaleToken", err)
		}
	})
}

func TestReleaseStepsDownFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		s := mustSession(t, f.client(), "a")
		l := mustTry(t, s, "jobs/x")
		steppedDown := false
		f.onRelease = func(string, uint64) { steppedDown = l.Ctx().Err() != nil }
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if !steppedDown {
			t.Error("the context was still live when the server released the lease")
		}
		if st, cause := l.State(), context.Cause(l.Ctx()); st != election.Released || cause != election.ErrReleased {
			t.Errorf("state %s, cause %v; want released", st, cause)
		}
		if _, err := f.m.Get("jobs/x"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("the server still has the lease: %v", err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Errorf("second Release: %v", err)
		}
		// Renewals stopped: none within 5s.
		time.Sleep(5 * time.Second)
		if n := len(f.renewCalls()); n != 0 {
			t.Errorf("%d renewals after the release", n)
		}
		// The name can be acquired again in the same session.
		l2 := mustTry(t, s, "jobs/x")
		if l2.Token() <= l.Token() {
			t.Errorf("token %d after re-acquiring, want more than %d", l2.Token(), l.Token())
		}
	})
}

func TestCloseReleasesAndOrphanDoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		s := mustSession(t, f.client(), "a")
		x, y := mustTry(t, s, "jobs/x"), mustTry(t, s, "jobs/y")
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, l := range []*election.Lease{x, y} {
			if l.State() != election.Released || l.Ctx().Err() == nil {
				t.Errorf("%s: state %s after Close, want released", l.Name(), l.State())
			}
			if _, err := f.m.Get(l.Name()); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("%s still held on the server after Close", l.Name())
			}
		}
		if _, err := s.TryAcquire(t.Context(), "jobs/z"); !errors.Is(err, election.ErrClosed) {
			t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
		}

		s2 := mustSession(t, f.client(), "b")
		t0 := time.Now()
		l := mustTry(t, s2, "jobs/x")
		s2.Orphan()
		if l.State() != election.Held {
			t.Fatalf("state %s right after Orphan, want held until the deadline", l.State())
		}
		<-l.Done()
		if at := time.Since(t0); at != safeFor {
			t.Errorf("orphaned lease lost after %s, want at its deadline (%s)", at, safeFor)
		}
		if err := l.Err(); !strings.Contains(fmt.Sprint(err), "the session stopped renewing") {
			t.Errorf("Err = %v, want it to say the session stopped renewing", err)
		}
		if _, err := f.m.Get("jobs/x"); err != nil {
			t.Errorf("the server no longer has the orphaned lease before its TTL: %v", err)
		}
		if n := len(f.renewCalls()); n != 0 {
			t.Errorf("%d renewals after Orphan", n)
		}
	})
}

func TestDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		s := mustSession(t, f.client(), "a")
		mustTry(t, s, "jobs/x")
		if _, err := s.TryAcquire(t.Context(), "jobs/x"); !errors.Is(err, election.ErrDuplicate) {
			t.Errorf("second TryAcquire = %v, want ErrDuplicate", err)
		}
	})
}

func TestTryAcquireHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		other := f.holdFor(t, "jobs/x", "b", ttl)
		s := mustSession(t, f.client(), "a")
		_, err := s.TryAcquire(t.Context(), "jobs/x")
		var held *client.HeldError
		if !errors.Is(err, client.ErrLeaseHeld) || !errors.As(err, &held) || held.Holder != "b" || held.Token != other.Token {
			t.Fatalf("TryAcquire = %v, want held by b", err)
		}
	})
}

func TestAcquireWaitsAndConfirmsTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		b := mustSession(t, f.client(), "b")
		bl := mustTry(t, b, "jobs/x")
		t0 := time.Now()
		go func() {
			time.Sleep(10 * time.Second)
			b.Close(context.Background())
		}()
		s := mustSession(t, f.client(), "a")
		l, err := s.Acquire(t.Context(), "jobs/x")
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if at := time.Since(t0); at != 10*time.Second {
			t.Errorf("granted after %s, want at b's release after 10s", at)
		}
		if l.Token() <= bl.Token() {
			t.Errorf("token %d, want more than b's %d", l.Token(), bl.Token())
		}
		// The grant was confirmed by a renewal sent after the wait, and
		// the deadline counts from there, not from the acquire sent 10s
		// earlier.
		calls := f.renewCalls()
		last := calls[len(calls)-1]
		if !last.at.Equal(t0.Add(10*time.Second)) || !slices.Equal(last.names, []string{"jobs/x"}) {
			t.Errorf("last renewal %s, want jobs/x at 10s", last)
		}
		if got := l.Deadline().Sub(t0); got != 10*time.Second+safeFor {
			t.Errorf("deadline %s after the start, want %s", got, 10*time.Second+safeFor)
		}
	})
}

func TestCampaignEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		f.holdFor(t, "jobs/x", "b", time.Hour)
		s := mustSession(t, f.client(), "a")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := s.Campaign(ctx, "jobs/x")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Campaign = %v, want the context's error", err)
		}
		// Closing the session ends a campaign too.
		go func() {
			time.Sleep(time.Second)
			s.Orphan()
		}()
		if _, err := s.Campaign(t.Context(), "jobs/x"); !errors.Is(err, election.ErrClosed) {
			t.Errorf("Campaign during Orphan = %v, want ErrClosed", err)
		}
	})
}

func TestSlowConfirmationIsRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Every request takes 2.8s to reach the server: longer than the
		// 2.67s a grant is safe for. No lease can be handed over whose
		// deadline passed on the way.
		f := newFakeCluster()
		c := f.client()
		c.latency = 2800 * time.Millisecond
		s := mustSession(t, c, "a")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		l, err := s.TryAcquire(ctx, "jobs/x")
		if err == nil {
			t.Fatalf("TryAcquire returned a lease with deadline %s at %s", l.Deadline(), time.Now())
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("TryAcquire = %v, want it to keep confirming until the context ended", err)
		}
	})
}
