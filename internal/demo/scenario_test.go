package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/localcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Short timing for tests: a TTL of one second, which a renewing worker
// keeps under the race detector on a loaded 2-core machine (the cluster's
// minimum, 400ms, leaves a renewal too little slack there and a worker
// steps down in a scenario that needs it to hold), and a pause that leaves
// B 1.5s after A's lease expired to take over and write. (With 500ms, -race
// on a loaded machine once let the expiry come after A woke up, and the
// scenario could not show a late write.)
const (
	testTTL   = time.Second
	testPause = testTTL + 1500*time.Millisecond
)

func testConfig(out io.Writer) Config {
	cfg := DefaultConfig()
	cfg.TTL, cfg.Pause = testTTL, testPause
	cfg.Stdout = out
	cfg.Format = JSON
	return cfg
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustCluster starts an embedded cluster.
func mustCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	cl, err := startCluster(ctxT(t, 20*time.Second), io.Discard)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Error(err)
		}
	})
	return cl
}

func mustClient(t *testing.T, cl *localcluster.Cluster) *client.Client {
	t.Helper()
	c, err := newClient(cl.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// jsonLines decodes every line of out as a JSON object.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", sc.Text(), err)
		}
		objs = append(objs, m)
	}
	return objs
}

// events returns the events in out (JSON lines) of one actor and op.
func events(t *testing.T, out, actor, op string) []Event {
	t.Helper()
	var evs []Event
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var j eventJSON
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if j.Type == "event" && j.Actor == actor && j.Op == op {
			evs = append(evs, j.event())
		}
	}
	return evs
}

func one(t *testing.T, out, actor, op string, i int) Event {
	t.Helper()
	evs := events(t, out, actor, op)
	if len(evs) <= i {
		t.Fatalf("want at least %d %s events of %s, got %d in:\n%s", i+1, op, actor, len(evs), out)
	}
	return evs[i]
}

// TestScenarios runs each scenario on one embedded cluster, in the order
// of the demo (failover last: it crashes the leader), and checks what
// happened against the cluster itself, not only against the verdict.
func TestScenarios(t *testing.T) {
	cl := mustCluster(t)
	c := mustClient(t, cl)
	procs := &inProcess{endpoints: cl.Endpoints(), mem: newMemStore()}

	run := func(t *testing.T, sc Scenario, f func(cfg *Config, tl *timeline) (Result, error)) (Result, string) {
		t.Helper()
		var out bytes.Buffer
		cfg := testConfig(&out)
		tl := newTimeline(&out, JSON, false)
		tl.begin(sc, 1, 1)
		r, err := f(&cfg, tl)
		if err != nil {
			t.Fatalf("scenario %s could not run: %v\n%s", sc, err, out.String())
		}
		t.Logf("%s:\n%s", sc, out.String())
		return r, out.String()
	}

	t.Run("fenced", func(t *testing.T) {
		r, out := run(t, Fenced, func(cfg *Config, tl *timeline) (Result, error) {
			return runPausedWriter(ctxT(t, 30*time.Second), tl, cfg, Fenced, pausedEnv{launcher: procs, storeSpec: storeKV, store: fencedStore{c}})
		})
		if !r.Passed {
			t.Fatalf("not as expected: %s", r.Summary)
		}
		a := one(t, out, "A", "acquire", 0)
		b := one(t, out, "B", "acquire", 0)
		if b.Token <= a.Token {
			t.Fatalf("B's token %d is not above A's %d", b.Token, a.Token)
		}
		if late := one(t, out, "A", "put", 1); late.Err != errStale || late.Value != valueA2 {
			t.Fatalf("A's late write: %+v, want rejected as %s", late, errStale)
		}
		// The cluster agrees: A's token is refused, and the value is B's.
		ctx := ctxT(t, 10*time.Second)
		if _, err := c.Put(ctx, reportKey, []byte("A-3"), "demo/"+string(Fenced), a.Token); !errors.Is(err, client.ErrStaleToken) {
			t.Fatalf("put with A's token after the scenario: %v, want ErrStaleToken", err)
		}
		kv, err := c.KVGet(ctx, reportKey)
		if err != nil || string(kv.Value) != valueB1 || kv.Token != b.Token {
			t.Fatalf("kv get %s = %+v, %v; want %q with token %d", reportKey, kv, err, valueB1, b.Token)
		}
	})

	t.Run("timeout-lock", func(t *testing.T) {
		r, out := run(t, TimeoutLock, func(cfg *Config, tl *timeline) (Result, error) {
			return runPausedWriter(ctxT(t, 30*time.Second), tl, cfg, TimeoutLock, pausedEnv{launcher: procs, storeSpec: storeMemory, store: procs.mem})
		})
		if !r.Passed {
			t.Fatalf("not as expected: %s", r.Summary)
		}
		late, bw := one(t, out, "A", "put", 1), one(t, out, "B", "put", 0)
		if late.Err != "" || late.At < bw.At {
			t.Fatalf("A's late write %+v, B's write %+v: want A's accepted after B's", late, bw)
		}
		if v, _, _ := procs.mem.Get(context.Background(), reportKey); v != valueA2 {
			t.Fatalf("store holds %q, want A's late %q over B's", v, valueA2)
		}
		check := one(t, out, "check", "read", 0)
		if check.Outcome != "LOST UPDATE: B's write was overwritten" {
			t.Fatalf("check: %+v", check)
		}
		if !strings.Contains(r.Summary, "LOST UPDATE") {
			t.Fatalf("summary %q does not name the lost update", r.Summary)
		}
	})

	// The demo's own check catches a store that does not fence: the fenced
	// scenario run against the timeout-only store fails, and says why.
	t.Run("fenced against an unfenced store fails", func(t *testing.T) {
		r, _ := run(t, Fenced, func(cfg *Config, tl *timeline) (Result, error) {
			return runPausedWriter(ctxT(t, 30*time.Second), tl, cfg, Fenced, pausedEnv{launcher: procs, storeSpec: storeMemory, store: procs.mem})
		})
		if r.Passed || !strings.Contains(r.Summary, "A's late write was accepted") {
			t.Fatalf("got %+v, want a failure naming the accepted late write", r)
		}
	})

	// A machine so slow that B's grant and write come long after A's
	// pause would have ended: A still writes after B, because the demo
	// holds it until B has written (before, A's late write came first and
	// the scenario failed under load).
	t.Run("slow taker", func(t *testing.T) {
		slow := &slowLauncher{inner: procs, actor: "B", delay: 2 * testPause}
		r, out := run(t, TimeoutLock, func(cfg *Config, tl *timeline) (Result, error) {
			return runPausedWriter(ctxT(t, 30*time.Second), tl, cfg, TimeoutLock, pausedEnv{launcher: slow, storeSpec: storeMemory, store: procs.mem})
		})
		if !r.Passed {
			t.Fatalf("not as expected: %s", r.Summary)
		}
		if wake, bw := one(t, out, "A", "wake", 0), one(t, out, "B", "put", 0); wake.At < bw.At || !strings.Contains(wake.Text, "wakes up after") {
			t.Fatalf("A woke %+v, B wrote %+v: want A held past its pause until B's write, and saying so", wake, bw)
		}
	})

	t.Run("failover", func(t *testing.T) {
		old, err := cl.WaitLeader(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r, out := run(t, Failover, func(cfg *Config, tl *timeline) (Result, error) {
			return runFailover(ctxT(t, 30*time.Second), tl, cfg, cl)
		})
		if !r.Passed {
			t.Fatalf("not as expected: %s", r.Summary)
		}
		if slices.Contains(cl.Running(), old) {
			t.Fatalf("the old leader %s was not crashed", old.ID)
		}
		b := one(t, out, "B", "acquire", 0)
		renews := events(t, out, "B", "renew")
		renew := renews[len(renews)-1]
		if renew.Token != b.Token || renew.Err != "" || !strings.HasPrefix(renew.Outcome, "ok, same token") {
			t.Fatalf("renewal after the crash %+v, want token %d kept", renew, b.Token)
		}
		if cgrant := one(t, out, "C", "acquire", 0); cgrant.Token <= b.Token {
			t.Fatalf("C's token %d is not above B's %d", cgrant.Token, b.Token)
		}
		// Every write B made is on the surviving nodes.
		ctx := ctxT(t, 10*time.Second)
		for i := 1; i <= 4; i++ {
			key := fmt.Sprintf("ledger/%d", i)
			kv, err := c.KVGet(ctx, key)
			if err != nil || string(kv.Value) != fmt.Sprintf("B-%d", i) || kv.Token != b.Token {
				t.Fatalf("kv get %s = %+v, %v; want B-%d with token %d", key, kv, err, i, b.Token)
			}
		}
	})
}

// TestRun runs the whole demo as tenure demo -o json does.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	cfg := testConfig(&out)
	results, err := Run(ctxT(t, 60*time.Second), cfg)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != len(AllScenarios) {
		t.Fatalf("got %d results, want %d", len(results), len(AllScenarios))
	}
	objs := jsonLines(t, out.String())
	types := map[string]int{}
	for _, o := range objs {
		types[o["type"].(string)]++
	}
	if types["demo"] != 1 || types["scenario"] != 3 || types["result"] != 3 || types["summary"] != 1 || types["event"] < 30 {
		t.Fatalf("line types %v", types)
	}
	last := objs[len(objs)-1]
	if last["type"] != "summary" || last["passed"] != true {
		t.Fatalf("last line %v, want a passed summary", last)
	}
	for _, o := range objs {
		if o["type"] == "event" {
			if _, err := time.ParseDuration(o["time"].(string)); err != nil {
				t.Fatalf("event time %v: %v", o["time"], err)
			}
			if tok, ok := o["token"]; ok {
				if _, isNum := tok.(float64); !isNum {
					t.Fatalf("token %v is not a JSON number", tok)
				}
			}
		}
	}
}

// TestRunInterrupted: a demo whose context ends stops at once, with an
// error, and leaves nothing running (goleak checks).
func TestRunInterrupted(t *testing.T) {
	var out bytes.Buffer
	cfg := testConfig(&out)
	cfg.Pause = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel once A has begun its pause.
	w := &watchWriter{w: &out, match: `"op":"pause"`, hit: cancel}
	cfg.Stdout = w
	start := time.Now()
	_, err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Run: %v, want interrupted", err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Fatalf("interrupted demo took %s to stop", el)
	}
}

// watchWriter calls hit once a write contains match.
type watchWriter struct {
	w     io.Writer
	match string
	hit   func()
	done  bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if !w.done && bytes.Contains(p, []byte(w.match)) {
		w.done = true
		w.hit()
	}
	return w.w.Write(p)
}

// slowLauncher starts the worker named actor only after delay, as a
// starved machine would.
type slowLauncher struct {
	inner launcher
	actor string
	delay time.Duration
}

func (l *slowLauncher) launch(ctx context.Context, spec workerSpec) (*workerRun, error) {
	if spec.Actor == l.actor {
		select {
		case <-time.After(l.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.inner.launch(ctx, spec)
}
