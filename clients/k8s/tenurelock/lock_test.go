package tenurelock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/clients/k8s/tenurelock"
	"github.com/tenure-io/tenure/internal/tenuredproc"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// tenured builds tenured from the repository once per test binary.
func tenured(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tenurelock-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, tenuredproc.Name())
		buildErr = tenuredproc.Build(binPath, tenuredproc.Package)
	})
	if buildErr != nil {
		t.Fatalf("build tenured: %v", buildErr)
	}
	return binPath
}

// startNode starts a single-node tenured, with extra flags, and returns
// its API address. Its output is printed if the test fails.
func startNode(t *testing.T, extra ...string) string {
	t.Helper()
	bin := tenured(t)
	ports, err := tenuredproc.ReservePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ports.Release)
	addrs := ports.Addrs()
	n := tenuredproc.Node{ID: "n1", API: addrs[0], Raft: addrs[1], DataDir: t.TempDir(),
		Extra: append([]string{"--election-timeout", "300ms", "--log-level", "warn"}, extra...)}
	var log bytes.Buffer
	var logMu sync.Mutex
	p, err := tenuredproc.Start(bin, n.Args(), writerFunc(func(b []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return log.Write(b)
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			logMu.Lock()
			t.Logf("tenured output:\n%s", log.String())
			logMu.Unlock()
		}
	})
	if err := p.WaitReady(t.Context(), n.API, 30*time.Second); err != nil {
		t.Fatalf("tenured not ready: %v\n%s", err, p.Output())
	}
	return n.API
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func newClient(t *testing.T, api string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: []string{api}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pausable wraps a lock: while paused, its Update calls block (ignoring
// their context), as they would in a process that stopped running, so
// client-go neither renews nor steps down.
type pausable struct {
	*tenurelock.Lock
	mu      sync.Mutex
	gate    chan struct{} // closed while running
	renewed chan struct{} // gets a value after each successful Update
	blocked chan struct{} // gets a value when an Update blocks
}

func newPausable(l *tenurelock.Lock) *pausable {
	g := make(chan struct{})
	close(g)
	return &pausable{Lock: l, gate: g, renewed: make(chan struct{}, 1), blocked: make(chan struct{}, 1)}
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) resume() {
	p.mu.Lock()
	close(p.gate)
	p.mu.Unlock()
}

func (p *pausable) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	select {
	case <-g:
	default:
		select {
		case p.blocked <- struct{}{}:
		default:
		}
		<-g
	}
	err := p.Lock.Update(ctx, ler)
	if err == nil {
		select {
		case p.renewed <- struct{}{}:
		default:
		}
	}
	return err
}

// candidate is one LeaderElector on a lock, with its events.
type candidate struct {
	name    string
	lock    *tenurelock.Lock
	wrapped *pausable
	started chan uint64 // the token, from OnStartedLeading's context
	leadCtx chan context.Context
	stopped chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
}

const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 200 * time.Millisecond
)

func newCandidate(t *testing.T, c *client.Client, name, lease string) *candidate {
	t.Helper()
	l, err := tenurelock.New(tenurelock.Config{Client: c, Name: lease, Identity: name})
	if err != nil {
		t.Fatal(err)
	}
	return &candidate{name: name, lock: l, wrapped: newPausable(l)}
}

// run starts the candidate's LeaderElector (client-go's own).
func (cd *candidate) run(t *testing.T, releaseOnCancel bool) {
	t.Helper()
	cd.started = make(chan uint64, 1)
	cd.leadCtx = make(chan context.Context, 1)
	cd.stopped = make(chan struct{})
	cd.done = make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            cd.wrapped,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: releaseOnCancel,
		Name:            cd.name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				tok, ok := tenurelock.TokenFrom(ctx)
				if !ok {
					t.Errorf("%s: OnStartedLeading without a token", cd.name)
					return
				}
				lctx, ltok, err := cd.lock.Leading(ctx)
				if err != nil || ltok != tok {
					t.Errorf("%s: Leading: token %d, err %v; TokenFrom said %d", cd.name, ltok, err, tok)
					return
				}
				cd.leadCtx <- lctx
				cd.started <- tok
			},
			OnStoppedLeading: func() { close(cd.stopped) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(tenurelock.NewContext(context.Background(), cd.lock))
	cd.cancel = cancel
	go func() {
		defer close(cd.done)
		le.Run(ctx)
	}()
	t.Cleanup(func() {
		cd.wrapped.mu.Lock()
		select {
		case <-cd.wrapped.gate:
		default:
			close(cd.wrapped.gate)
		}
		cd.wrapped.mu.Unlock()
		cancel()
		<-cd.done
	})
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("waited 20s for %s", what)
		panic("unreachable")
	}
}

// TestPausedLeaderIsFencedOff drives client-go's LeaderElector with two
// candidates on one tenure lease: A leads and writes, then pauses (its
// renewals block) past its lease; B takes over with a larger token and
// writes; A's late write with its token is refused by tenure's fenced
// store, and A's own leader context had ended before B was granted.
func TestPausedLeaderIsFencedOff(t *testing.T) {
	api := startNode(t)
	c := newClient(t, api)
	const lease, key = "k8s/paused", "k8s/paused/report"
	a := newCandidate(t, c, "pod-a", lease)
	b := newCandidate(t, c, "pod-b", lease)

	a.run(t, false)
	tokA := wait(t, a.started, "A to lead")
	aCtx := wait(t, a.leadCtx, "A's leader context")
	if _, err := c.Put(t.Context(), key, []byte("A-1"), lease, tokA); err != nil {
		t.Fatalf("A's write with token %d: %v", tokA, err)
	}

	b.run(t, true)
	// While A renews, B does not lead: A renews several times after B
	// started campaigning, and B has not started.
	// (The renewals are counted after B's first Get: B's elector polls
	// every RetryPeriod, as A renews.)
	leadsWhileOtherWaits(t, a, b, 5)
	select {
	case tok := <-b.started:
		t.Fatalf("B leads (token %d) while A renews", tok)
	default:
	}

	// A pauses: its next renewal blocks.
	a.wrapped.pause()
	wait(t, a.wrapped.blocked, "A's renewal to block")

	tokB := wait(t, b.started, "B to take over")
	if tokB <= tokA {
		t.Fatalf("B's token %d is not larger than A's %d", tokB, tokA)
	}
	// tenure's step-down came first: when B was granted the lease, A's
	// term was over by A's own clock, and its leader context has ended.
	if tok, ok := a.lock.Token(); ok {
		t.Fatalf("A still reports token %d after B was granted %d", tok, tokB)
	}
	<-aCtx.Done()
	if !errors.Is(context.Cause(aCtx), tenurelock.ErrNotLeading) {
		t.Fatalf("A's leader context ended with %v, want ErrNotLeading", context.Cause(aCtx))
	}
	if _, err := c.Put(t.Context(), key, []byte("B-1"), lease, tokB); err != nil {
		t.Fatalf("B's write with token %d: %v", tokB, err)
	}

	// A wakes up, still believing it leads (client-go has not stepped
	// down: its renewal was blocked), and writes with its token.
	select {
	case <-a.stopped:
		t.Fatal("A's LeaderElector stepped down while its renewal was blocked")
	default:
	}
	a.wrapped.resume()
	_, err := c.Put(t.Context(), key, []byte("A-2"), lease, tokA)
	if !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("A's late write with token %d: got %v, want a stale-token refusal", tokA, err)
	}
	kv, err := c.KVGet(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "B-1" || kv.Token != tokB {
		t.Fatalf("the store holds %q (token %d), want B's \"B-1\" (token %d)", kv.Value, kv.Token, tokB)
	}
	// And client-go's elector of A steps down once its renewal is refused.
	wait(t, a.stopped, "A's LeaderElector to stop leading")
	if tok, ok := b.lock.Token(); !ok || tok != tokB {
		t.Fatalf("B's lock: token %d (%v); want %d", tok, ok, tokB)
	}
}

// TestEveryTermHasItsOwnToken: a candidate that led, stepped down and
// leads again gets a larger token; a released lease is free at once.
func TestEveryTermHasItsOwnToken(t *testing.T) {
	api := startNode(t)
	c := newClient(t, api)
	const lease = "k8s/terms"
	a := newCandidate(t, c, "pod-a", lease)
	a.run(t, true)
	tok1 := wait(t, a.started, "A's first term")
	a.cancel()
	wait(t, a.done, "A's elector to return")
	if _, err := c.Get(t.Context(), lease); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after ReleaseOnCancel the lease is still held: %v", err)
	}
	a.run(t, true)
	tok2 := wait(t, a.started, "A's second term")
	if tok2 <= tok1 {
		t.Fatalf("second term's token %d is not larger than the first's %d", tok2, tok1)
	}
}

func TestConfigErrors(t *testing.T) {
	c, err := client.New(client.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		cfg  tenurelock.Config
		want string
	}{
		{tenurelock.Config{Name: "x", Identity: "a"}, "Client is nil"},
		{tenurelock.Config{Client: c, Identity: "a"}, "Name is empty"},
		{tenurelock.Config{Client: c, Name: "x"}, "Identity is empty"},
		{tenurelock.Config{Client: c, Name: "x", Identity: "a", TTL: -time.Second}, "out of range"},
		{tenurelock.Config{Client: c, Name: "x", Identity: "a", Drift: 0.7}, "out of range"},
	} {
		if _, err := tenurelock.New(tc.cfg); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("New(%+v): %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	l, err := tenurelock.New(tenurelock.Config{Client: c, Name: "x", Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Leading(context.Background()); !errors.Is(err, tenurelock.ErrNotLeading) {
		t.Fatalf("Leading without a term: %v", err)
	}
	if _, ok := tenurelock.TokenFrom(tenurelock.NewContext(context.Background(), l)); ok {
		t.Fatal("TokenFrom reports a token without a term")
	}
	if got := fmt.Sprint(l.Identity(), " ", l.Describe()); got != "a tenure lease x" {
		t.Fatalf("Identity, Describe: %q", got)
	}
}

// leadsWhileOtherWaits waits until a has renewed n times after b started
// campaigning (one renewal that may have come before b started is not
// counted) and fails if b leads meanwhile.
func leadsWhileOtherWaits(t *testing.T, a, b *candidate, n int) {
	t.Helper()
	<-a.wrapped.renewed
	timeout := time.After(20 * time.Second)
	for seen := 0; seen < n; {
		select {
		case <-a.wrapped.renewed:
			seen++
		case tok := <-b.started:
			t.Fatalf("B leads (token %d) while A renews", tok)
		case <-timeout:
			t.Fatalf("waited 20s for A's renewals; %d seen", seen)
		}
	}
}
