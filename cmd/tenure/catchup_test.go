package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

// appendGate holds back the entries a leader sends to one member, so that
// the member falls behind and stays behind until the test lets it catch
// up: node.Config.FaultBeforeAppend blocks while the gate is shut.
type appendGate struct {
	id      atomic.Pointer[string] // the member held back, nil for none
	held    atomic.Int32           // appends held back so far
	release chan struct{}
	once    sync.Once
}

func newAppendGate(t *testing.T) *appendGate {
	g := &appendGate{release: make(chan struct{})}
	t.Cleanup(g.open) // before the cluster stops: a held append blocks raft's transport
	return g
}

// configure sets the gate on every member's node.
func (g *appendGate) configure(cfg *node.Config) {
	id := cfg.ID
	cfg.FaultBeforeAppend = func(first, last uint64) {
		if p := g.id.Load(); p != nil && *p == id {
			g.held.Add(1)
			<-g.release
		}
	}
}

func (g *appendGate) shut(id string) { g.id.Store(&id) }
func (g *appendGate) open()          { g.once.Do(func() { close(g.release) }) }

// readyz returns the status code and body of addr's /readyz.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	res, err := hc.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(body))
}

// TestCatchingUpAfterARestart: a member that restarted after the cluster
// went on without it, and has not yet applied what the leader committed
// (the leader's entries are held back), says so: its status reads
// "catching up: applied N of M", /readyz is 503 with that reason (not "no
// leader": a leader is known), member list shows the leader's view with
// every API address and every member reachable, and a leadership transfer
// to it is refused with the reason. Once it has caught up, all is as
// usual and the transfer goes through.
func TestCatchingUpAfterARestart(t *testing.T) {
	gate := newAppendGate(t)
	// A long election timeout: no election on a loaded machine under the
	// race detector moves the leader while the test asks it things.
	c := testcluster.Start(t, testcluster.Config{Size: 3, DataDir: t.TempDir(), Node: gate.configure, ElectionTimeout: testcluster.CalmElectionTimeout})
	leader := c.Leader()
	var f *testcluster.Member
	for _, m := range c.Members() {
		if m != leader {
			f = m
			break
		}
	}
	c.Stop(f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// More entries than a follower may trail by and still count as
	// caught up, one each.
	for i := range 100 {
		op := lease.Op{Type: lease.OpAcquire, Name: fmt.Sprintf("jobs/%d", i), Holder: "h", TTL: time.Hour}
		if _, err := leader.Node.Do1(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	commit := leader.Node.Status().CommitIndex
	gate.shut(f.ID)
	c.Restart(f)
	testcluster.Eventually(t, f.ID+" to learn the leader's commit index and be held back", 30*time.Second, func() error {
		p := f.Node.Progress()
		if _, _, err := f.Node.Leader(); err != nil || p.LeaderCommit < commit || gate.held.Load() == 0 {
			return fmt.Errorf("progress %+v, leader: %v, appends held: %d", p, err, gate.held.Load())
		}
		return nil
	})
	p := f.Node.Progress()
	if !p.Behind {
		t.Fatalf("%s has applied %d of the leader's %d and says it is not behind", f.ID, p.Applied, p.LeaderCommit)
	}
	catching := fmt.Sprintf("catching up: applied %d of %d", p.Applied, p.LeaderCommit)
	env := map[string]string{"TENURE_ENDPOINTS": f.Addr}

	// status: the state says so, and the members are the leader's.
	st := runCLI(ctx, env, "status")
	if st.code != 0 || !regexp.MustCompile(`(?m)^state +follower, `+catching+`$`).MatchString(st.stdout) ||
		!strings.Contains(st.stdout, "members as the leader "+leader.ID+" sees them") {
		t.Errorf("status on %s, which is behind: exit %d, want a state %q and the leader's members:\n%s%s", f.ID, st.code, catching, st.stdout, st.stderr)
	}
	// readiness: not ready, and why.
	code, body := readyz(t, f.Addr)
	if want := "not ready: " + catching + " (leader " + leader.ID + ")"; code != http.StatusServiceUnavailable || body != want {
		t.Errorf("/readyz on %s, which is behind: %d %q, want 503 %q", f.ID, code, body, want)
	}
	// member list: every API address, every member reachable, the
	// leader marked.
	ml := runCLI(ctx, env, "member", "list", "-o", "json")
	if ml.code != 0 {
		t.Fatalf("member list on %s: exit %d\n%s", f.ID, ml.code, ml.stderr)
	}
	for _, m := range c.Members() {
		want := fmt.Sprintf(`{"id":%q,"raft_address":`, m.ID)
		line := ""
		for _, l := range strings.Split(ml.stdout, "\n") {
			if strings.HasPrefix(l, want) {
				line = l
			}
		}
		if !strings.Contains(line, fmt.Sprintf(`"api_address":%q`, m.Addr)) || !strings.Contains(line, `"reachable":true`) ||
			strings.Contains(line, `"leader":true`) != (m == leader) {
			t.Errorf("member list on %s, which is behind: member %s is %q, want its API address %s, reachable, and the leader marked (%s)",
				f.ID, m.ID, line, m.Addr, leader.ID)
		}
	}
	// leader transfer: refused with the reason, and nothing moved.
	tr := runCLI(ctx, map[string]string{"TENURE_ENDPOINTS": leader.Addr}, "leader", "transfer", f.ID, "--request-timeout", "2s")
	table := runCLI(ctx, env, "member", "list")
	t.Logf("while %s catches up:\n$ tenure status\n%s\n$ tenure member list\n%s\n$ curl %s/readyz\n%d %s\n$ tenure leader transfer %s\n%s",
		f.ID, st.stdout, table.stdout, f.Addr, code, body, f.ID, tr.stderr)
	if tr.code == 0 || !regexp.MustCompile(f.ID+` is catching up: applied \d+ of \d+`).MatchString(tr.stderr) {
		t.Errorf("leader transfer to %s, which is behind: exit %d, want a refusal that says it is catching up:\n%s%s", f.ID, tr.code, tr.stdout, tr.stderr)
	}
	if !leader.Node.IsLeader() {
		t.Errorf("the refused transfer moved leadership away from %s", leader.ID)
	}

	gate.open()
	testcluster.Eventually(t, f.ID+" to catch up", time.Minute, func() error {
		if p := f.Node.Progress(); p.Behind {
			return fmt.Errorf("progress %+v", p)
		}
		return nil
	})
	code, body = readyz(t, f.Addr)
	if want := "ok: following " + leader.ID; code != http.StatusOK || body != want {
		t.Errorf("/readyz on %s, caught up: %d %q, want 200 %q", f.ID, code, body, want)
	}
	st = runCLI(ctx, env, "status")
	if st.code != 0 || strings.Contains(st.stdout, "catching up") || strings.Contains(st.stdout, "members as the leader") {
		t.Errorf("status on %s, caught up: exit %d\n%s%s", f.ID, st.code, st.stdout, st.stderr)
	}
	tr = runCLI(ctx, map[string]string{"TENURE_ENDPOINTS": leader.Addr}, "leader", "transfer", f.ID)
	if tr.code != 0 || strings.TrimSpace(tr.stdout) != "leadership transferred to "+f.ID {
		t.Errorf("leader transfer to %s, caught up: exit %d\n%s%s", f.ID, tr.code, tr.stdout, tr.stderr)
	}
}
