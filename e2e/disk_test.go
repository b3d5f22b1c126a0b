package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A voter whose data directory was replaced by an empty one, restarted
// under its old ID and address, must not vote until it has caught up: its
// vote could elect a member that never had the entries it acknowledged.
//
// Three nodes L (leader), F and G. G is paused and lags; L grants tokens
// with F; L is killed; F's data directory is wiped and F starts again with
// its old ID and addresses, joining through G; G resumes. G lacks the
// grants, and only F's vote could elect it: no token granted before may
// be granted again. Once L is back, the cluster serves with larger tokens
// and F becomes a voter again.
func TestWipedVoterDoesNotVoteUntilCaughtUp(t *testing.T) {
	three := startThree(t)
	servers := map[string]*server{}
	for _, s := range three {
		servers[s.name] = s
	}
	st := waitVoters(t, three[0].api, 3)
	l := servers[st.Leader]
	var f, g *server
	for _, s := range three {
		switch {
		case s == l:
		case f == nil:
			f = s
		default:
			g = s
		}
	}
	t.Logf("leader %s, wiped follower %s, lagging follower %s", l.name, f.name, g.name)

	g.proc.Signal(syscall.SIGSTOP)
	paused := true
	defer func() {
		if paused {
			g.proc.Signal(syscall.SIGCONT)
		}
	}()
	var granted uint64
	for i := range 5 {
		lease := acquireJSON(t, l.api, fmt.Sprintf("before/%d", i), "--holder", "h", "--ttl", "1h", "--request-timeout", "5s")
		granted = max(granted, lease.Token)
	}
	t.Logf("granted tokens up to %d with %s and %s while %s was paused", granted, l.name, f.name, g.name)

	l.kill()
	f.kill()
	if err := os.RemoveAll(f.dataDir); err != nil {
		t.Fatal(err)
	}
	f.node.Join = g.api
	fromF, fromL, fromG := len(f.log.String()), len(l.log.String()), len(g.log.String())
	since := func(s *server, from int) string { return s.log.String()[from:] }
	f.start()
	g.proc.Signal(syscall.SIGCONT)
	paused = false

	// G and F alone: F must not vote, so nothing is granted. Try for a
	// good many election timeouts.
	both := g.api + "," + f.api
	deadline := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		r := cli(t, both, "acquire", fmt.Sprintf("after/%d", i), "--holder", "x", "--ttl", "5s", "-o", "json", "--request-timeout", "1s")
		if r.code == 0 {
			t.Fatalf("granted while the only other voter had lost its log: %s (tokens up to %d were granted before)", strings.TrimSpace(r.stdout), granted)
		}
	}
	if r := cli(t, f.api, "status", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"catching_up":true`) {
		t.Errorf("%s's status does not say it is catching up: %v", f.name, r)
	}
	if !strings.Contains(since(f, fromF), "not voting") {
		t.Errorf("%s's log does not say that it does not vote:\n%s", f.name, since(f, fromF))
	}

	// L comes back with its log: the cluster serves again, F catches up
	// as a non-voter and is made a voter again.
	l.start()
	all := l.api + "," + g.api + "," + f.api
	var after jsonLease
	eventually(t, "a grant once the old leader is back", 30*time.Second, func() error {
		r := cli(t, all, "acquire", "after-recovery", "--holder", "y", "--ttl", "5s", "-o", "json", "--request-timeout", "2s")
		if r.code != 0 {
			return fmt.Errorf("%v", r)
		}
		after = decode[jsonLease](t, r.stdout)
		return nil
	})
	if after.Token <= granted {
		t.Fatalf("token %d after recovery, not larger than %d granted before", after.Token, granted)
	}
	waitVoters(t, l.api, 3)
	eventually(t, f.name+" to catch up and say so", 30*time.Second, func() error {
		if !strings.Contains(since(f, fromF), "caught up with the cluster") {
			return fmt.Errorf("its log does not say it caught up")
		}
		if _, err := os.Stat(filepath.Join(f.dataDir, "catching-up")); !os.IsNotExist(err) {
			return fmt.Errorf("its catching-up mark is still there: %v", err)
		}
		return nil
	})
	if !strings.Contains(since(l, fromL)+since(g, fromG), "demoted it to a non-voter") {
		t.Errorf("no leader logged that it demoted %s", f.name)
	}
	waitVoters(t, f.api, 3)
}

// A single node whose raft-log was emptied while a snapshot survived must
// not start from the snapshot: the grants after it would be granted again.
func TestEmptiedLogAfterSnapshotRefused(t *testing.T) {
	s := newServer(t, "n1", "", "--election-timeout", "200ms", "--snapshot-interval", "100ms", "--snapshot-threshold", "5")
	s.start()
	s.waitReady(20 * time.Second)
	for i := range 20 {
		acquireJSON(t, s.api, fmt.Sprintf("a/%d", i), "--holder", "h", "--ttl", "1h")
	}
	eventually(t, "a snapshot", 20*time.Second, func() error {
		m, _ := filepath.Glob(filepath.Join(s.dataDir, "snapshots", "*", "meta.json"))
		if len(m) == 0 {
			return fmt.Errorf("no snapshot in %s", filepath.Join(s.dataDir, "snapshots"))
		}
		return nil
	})
	var last uint64
	for i := range 3 {
		last = acquireJSON(t, s.api, fmt.Sprintf("b/%d", i), "--holder", "h", "--ttl", "1h").Token
	}
	s.kill()
	files, _ := filepath.Glob(filepath.Join(s.dataDir, "raft-log", "*"))
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	s.start()
	select {
	case <-s.proc.Exited():
	case <-time.After(20 * time.Second):
		r := cli(t, s.api, "acquire", "c", "--holder", "h", "--ttl", "5s", "-o", "json", "--request-timeout", "2s")
		t.Fatalf("tenured still runs 20s after its raft-log was emptied (tokens up to %d were granted); acquire: %v", last, r)
	}
	out := s.proc.Output()
	if code := s.proc.ExitCode(); code != 1 || !strings.Contains(out, filepath.Join(s.dataDir, "raft-log")) {
		t.Fatalf("tenured exited %d, want 1 with a message naming raft-log:\n%s", code, out)
	}
	t.Logf("refused as it must:\n%s", out)
}
