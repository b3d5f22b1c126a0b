package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
)

// jsonHistory is the dashboard's history of a name (/ui/api/history):
// its terms with their start and end in cluster time (milliseconds).
type jsonHistory struct {
	Terms []struct {
		Holder string  `json:"holder"`
		Token  uint64  `json:"token"`
		Start  float64 `json:"start"`
		End    float64 `json:"end"`
		Ended  string  `json:"ended"`
	} `json:"terms"`
	Waiters []string `json:"waiters"`
}

// history reads the history of name from s.
func history(t *testing.T, s *server, name string) jsonHistory {
	t.Helper()
	res, err := http.Get("http://" + s.api + "/ui/api/history?name=" + url.QueryEscape(name))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var h jsonHistory
	if err := json.NewDecoder(res.Body).Decode(&h); err != nil {
		t.Fatalf("history of %s: %v", name, err)
	}
	return h
}

// waitQueued waits until holder waits for name on s.
func waitQueued(t *testing.T, s *server, name, holder string) {
	t.Helper()
	eventually(t, holder+" to wait for "+name, 20*time.Second, func() error {
		if h := history(t, s, name); !strings.Contains(strings.Join(h.Waiters, " "), holder) {
			return fmt.Errorf("waiters %v", h.Waiters)
		}
		return nil
	})
}

// TestRevokeFromTheCLI: an operator revokes a grant; the waiter gets the
// name with a larger token, the old holder's renewal and writes are
// refused with the reason; bad requests change nothing.
func TestRevokeFromTheCLI(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	a := acquireJSON(t, ep, "jobs/rv", "--holder", "a", "--ttl", "30s")
	tok := fmt.Sprint(a.Token)
	mustCode(t, 0, cli(t, ep, "kv", "put", "rv/k", "v1", "--lease", "jobs/rv", "--token", tok), "put")
	watch := startCLI(t, ep, "watch", "jobs/rv", "-o", "json")
	if l := watch.line("the watch's current state"); !strings.Contains(l, `"type":"current"`) {
		t.Fatalf("watch printed %q first", l)
	}
	watch.line("the watch's synced")
	w := startCLI(t, ep, "acquire", "jobs/rv", "--holder", "w", "--wait", "--timeout", "30s", "-o", "json")
	waitQueued(t, s, "jobs/rv", "w")

	state := func() string {
		t.Helper()
		r := cli(t, ep, "get", "jobs/rv", "-o", "json")
		return fmt.Sprint(r.code, strings.Contains(r.stdout, `"token":`+tok))
	}
	before := state()
	for _, tc := range []struct {
		what string
		args []string
		code int
		want string
	}{
		{"no reason", []string{"revoke", "jobs/rv"}, 2, "--reason is required"},
		{"an empty reason", []string{"revoke", "jobs/rv", "--reason", " "}, 2, "--reason is required"},
		{"a reason too long", []string{"revoke", "jobs/rv", "--reason", strings.Repeat("x", 300)}, 2, "reason is 300 bytes, more than the limit of 256"},
		{"a name not held", []string{"revoke", "jobs/none", "--reason", "r"}, 6, `tenure: "jobs/none" is not held: nothing to revoke`},
		{"another token", []string{"revoke", "jobs/rv", "--token", "999", "--reason", "r"}, 6, `"jobs/rv" has no live grant with token 999`},
		{"a bad token", []string{"revoke", "jobs/rv", "--token", "0", "--reason", "r"}, 2, "positive integer"},
	} {
		r := cli(t, ep, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: %v, want exit %d and %q", tc.what, r, tc.code, tc.want)
		}
		if after := state(); after != before {
			t.Fatalf("%s changed the state: %s, was %s", tc.what, after, before)
		}
	}

	r := cli(t, ep, "revoke", "jobs/rv", "--reason", "disk failing on a", "-o", "json")
	mustCode(t, 0, r, "revoke")
	var out struct {
		Name    string `json:"name"`
		Holder  string `json:"holder"`
		Token   uint64 `json:"token"`
		Revoked bool   `json:"revoked"`
		Reason  string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Name != "jobs/rv" || out.Holder != "a" || out.Token != a.Token ||
		!out.Revoked || out.Reason != "disk failing on a" {
		t.Fatalf("revoke printed %q (%v)", r.stdout, err)
	}
	// Watchers see the revocation, with its reason, then the grant.
	ev := decode[map[string]any](t, watch.line("the revoked event"))
	if ev["type"] != "revoked" || ev["token"] != float64(a.Token) || ev["reason"] != "disk failing on a" {
		t.Fatalf("watch printed %v, want the revocation of token %d with its reason", ev, a.Token)
	}
	if ev := decode[map[string]any](t, watch.line("the waiter's grant event")); ev["type"] != "granted" || ev["holder"] != "w" {
		t.Fatalf("watch printed %v, want w's grant", ev)
	}
	// The waiter is granted, with a larger token.
	wl := decode[jsonLease](t, w.line("w's grant"))
	if wl.Holder != "w" || wl.Token <= a.Token {
		t.Fatalf("w got %+v, want a token above %d", wl, a.Token)
	}
	// The old holder learns it at its next renewal, with the reason; its
	// writes are refused.
	r = cli(t, ep, "renew", "jobs/rv", "--token", tok)
	mustCode(t, 4, r, "renewal of the revoked grant")
	if !strings.Contains(r.stderr, "revoked by an operator: disk failing on a") {
		t.Fatalf("renewal of the revoked grant: %v", r)
	}
	r = cli(t, ep, "renew", "jobs/rv", "--token", tok, "-o", "json")
	if !strings.Contains(r.stderr, `"revoke_reason":"disk failing on a"`) || !strings.Contains(r.stderr, `"reason":"STALE_TOKEN"`) {
		t.Fatalf("renewal of the revoked grant, -o json: %v", r)
	}
	mustCode(t, 4, cli(t, ep, "kv", "put", "rv/k", "v2", "--lease", "jobs/rv", "--token", tok), "put with the revoked token")
	if r := cli(t, ep, "kv", "get", "rv/k", "--print-value-only"); r.stdout != "v1" {
		t.Fatalf("the refused write changed the key: %v", r)
	}
	// Revoking again: not held by that token.
	r = cli(t, ep, "revoke", "jobs/rv", "--token", tok, "--reason", "again")
	mustCode(t, 6, r, "second revoke")
	if !strings.Contains(r.stderr, "revoked already (disk failing on a)") {
		t.Fatalf("second revoke: %v", r)
	}

	// A semaphore: without --token every slot.
	s1 := acquireJSON(t, ep, "jobs/sem", "--limit", "2", "--holder", "s1")
	s2 := acquireJSON(t, ep, "jobs/sem", "--limit", "2", "--holder", "s2")
	r = cli(t, ep, "revoke", "jobs/sem", "--reason", "maintenance")
	mustCode(t, 0, r, "revoke of a semaphore")
	want := fmt.Sprintf("revoked jobs/sem (token %d, held by s1): maintenance\nrevoked jobs/sem (token %d, held by s2): maintenance\n", s1.Token, s2.Token)
	if r.stdout != want {
		t.Fatalf("revoke of a semaphore printed %q, want %q", r.stdout, want)
	}
	mustCode(t, 6, cli(t, ep, "get", "jobs/sem"), "get of the revoked semaphore")
}

// TestLockDelayAfterSIGKILL: a holder with a lock-delay is SIGKILLed; its
// grant expires, and the next grant comes the delay after the expiry, in
// cluster time: a waiter is granted then, and a try in between is told
// how long ago the grant ended and how long the delay has left, which add
// up to the delay. A released grant delays nothing.
func TestLockDelayAfterSIGKILL(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	const delay = 3 * time.Second
	c := newClient(t, "", s.api)
	ctx := t.Context()

	pidFile := filepath.Join(t.TempDir(), "child.pid")
	holder := startCLI(t, ep, "run", "jobs/ld", "--holder", "a", "--ttl", "2s", "--lock-delay", delay.String(), "--",
		"sh", "-c", `echo $$ > "`+pidFile+`"; exec sleep 120`)
	var child int
	eventually(t, "tenure run to start its command", 20*time.Second, func() error {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err
	})
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	a, err := c.Get(ctx, "jobs/ld")
	if err != nil || a.Holder != "a" || a.LockDelay != delay {
		t.Fatalf("the holder's grant: %+v, %v; want a with lock-delay %s", a, err, delay)
	}
	// SIGKILL the holder: nothing releases the lease.
	holder.cmd.Process.Signal(syscall.SIGKILL)
	syscall.Kill(child, syscall.SIGKILL)
	<-holder.done
	waiter := startCLI(t, ep, "acquire", "jobs/ld", "--holder", "c", "--wait", "--timeout", "60s", "-o", "json")
	waitQueued(t, s, "jobs/ld", "c")

	// Try until the name is in its lock-delay, and read the cluster time
	// of that try: the status right after it, when it was the only entry
	// applied since the status before it.
	var (
		held    *client.HeldError
		triedAt time.Duration
		tries   int
	)
	deadline := time.Now().Add(30 * time.Second)
	for held == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no lock-delay seen in 30s (%d tries)", tries)
		}
		before, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Acquire(ctx, "jobs/ld", "b", 2*time.Second)
		after, serr := c.Status(ctx)
		if serr != nil {
			t.Fatal(serr)
		}
		tries++
		he, ok := errors.AsType[*client.HeldError](err)
		if !ok {
			t.Fatalf("try %d: %v, want held (by a, or its lock-delay)", tries, err)
		}
		if !he.LockDelay {
			if he.Holder != "a" || he.Token != a.Token {
				t.Fatalf("try %d: %v, want held by a (its grant not expired yet) or its lock-delay", tries, err)
			}
			time.Sleep(20 * time.Millisecond) // poll: a's grant has not expired yet
			continue
		}
		if after.AppliedIndex == before.AppliedIndex+1 {
			held, triedAt = he, after.ClusterTime
		}
	}
	if held.Holder != "a" || held.Token != a.Token || held.Ended+held.Remaining != delay {
		t.Fatalf("lock-delay %+v: want a's grant %d, ended + remaining = %s", held, a.Token, delay)
	}
	expiry, delayEnd := triedAt-held.Ended, triedAt+held.Remaining

	cl := decode[jsonLease](t, waiter.line("the waiter's grant"))
	if cl.Holder != "c" || cl.Token <= a.Token {
		t.Fatalf("the waiter got %+v", cl)
	}
	h := history(t, s, "jobs/ld")
	if len(h.Terms) != 2 || h.Terms[0].Token != a.Token || h.Terms[0].Ended != "expired" || h.Terms[1].Token != cl.Token {
		t.Fatalf("history %+v: want a's term expired, then c's", h)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// Everything in cluster time: the expiry was noticed at or after the
	// grant's expiry, the waiter was granted at or after the delay's
	// end, and promptly (the leader's expirer woke up for it).
	if end := h.Terms[0].End; end < ms(expiry) {
		t.Fatalf("a's grant ended at %.3fms, before its expiry at %.3fms", end, ms(expiry))
	}
	start := h.Terms[1].Start
	if start < ms(delayEnd) {
		t.Fatalf("c was granted at %.3fms, before the lock-delay ended at %.3fms (expiry %.3fms + %s)", start, ms(delayEnd), ms(expiry), delay)
	}
	if start-ms(delayEnd) > 1000 {
		t.Fatalf("c was granted at %.3fms, %.0fms after the lock-delay ended at %.3fms", start, start-ms(delayEnd), ms(delayEnd))
	}
	t.Logf("expiry %.3fms, delay end %.3fms, c granted %.3fms (%d tries)", ms(expiry), ms(delayEnd), start, tries)

	// A release skips the delay: the waiter is granted in the same entry.
	b := acquireJSON(t, ep, "jobs/ld2", "--holder", "b", "--ttl", "30s", "--lock-delay", "1m")
	w := startCLI(t, ep, "acquire", "jobs/ld2", "--holder", "w", "--wait", "--timeout", "30s", "-o", "json")
	waitQueued(t, s, "jobs/ld2", "w")
	mustCode(t, 0, cli(t, ep, "release", "jobs/ld2", "--token", fmt.Sprint(b.Token)), "release")
	wl := decode[jsonLease](t, w.line("w's grant"))
	h = history(t, s, "jobs/ld2")
	if len(h.Terms) != 2 || h.Terms[0].Ended != "released" || h.Terms[1].Token != wl.Token || h.Terms[1].Start != h.Terms[0].End {
		t.Fatalf("history %+v: want b's term released and w's starting at that moment", h)
	}

	// Bad input: more than the bound, or negative; nothing granted.
	r := cli(t, ep, "acquire", "jobs/ld3", "--lock-delay", "2m")
	if r.code != 2 || !strings.Contains(r.stderr, "lock_delay 2m0s is above the maximum of 1m0s") {
		t.Fatalf("acquire --lock-delay 2m: %v", r)
	}
	r = cli(t, ep, "acquire", "jobs/ld3", "--lock-delay", "-1s")
	if r.code != 2 || !strings.Contains(r.stderr, "--lock-delay must not be negative") {
		t.Fatalf("acquire --lock-delay -1s: %v", r)
	}
	mustCode(t, 6, cli(t, ep, "get", "jobs/ld3"), "get after the refused acquires")
}
