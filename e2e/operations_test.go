package e2e

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// caughtUp waits until s has a leader and has applied everything the
// leader has.
func caughtUp(t *testing.T, s *server, byID map[string]*server) {
	t.Helper()
	eventually(t, s.name+" to catch up with the leader", 30*time.Second, func() error {
		st, err := status(t, s.api)
		if err != nil {
			return err
		}
		l, ok := byID[st.Leader]
		if !ok {
			return fmt.Errorf("%s sees leader %q", s.name, st.Leader)
		}
		ref, err := status(t, l.api)
		if err != nil {
			return err
		}
		if st.Applied < ref.Applied {
			return fmt.Errorf("%s applied %d, the leader %d", s.name, st.Applied, ref.Applied)
		}
		return nil
	})
}

// TestReplaceFailedMember runs the procedure "Replace a failed member"
// of docs/operations.md: a member's disk is lost (killed, directory
// deleted); it is removed with tenure member remove, and a new member
// with an empty data directory joins in its place and becomes a voter.
// The leases, values and tokens go on.
func TestReplaceFailedMember(t *testing.T) {
	ns := startThree(t)
	all := ns[0].api + "," + ns[1].api + "," + ns[2].api
	l := acquireJSON(t, all, "svc/a", "--holder", "w", "--ttl", "1h")
	mustCode(t, 0, cli(t, all, "kv", "put", "svc/a/v", "x", "--lease", "svc/a", "--token", fmt.Sprint(l.Token)), "kv put")
	st := waitVoters(t, all, 3)
	var failed *server
	var rest []*server
	for _, s := range ns {
		if s.name != st.Leader && failed == nil {
			failed = s
		} else {
			rest = append(rest, s)
		}
	}
	failed.kill()
	if err := os.RemoveAll(failed.dataDir); err != nil {
		t.Fatal(err)
	}
	restAPI := rest[0].api + "," + rest[1].api
	mustCode(t, 0, cli(t, restAPI, "member", "remove", failed.name), "member remove of the failed member")
	waitVoters(t, restAPI, 2)

	n4 := newServer(t, "n4", rest[0].api, "--election-timeout", calmElection)
	n4.start()
	for _, s := range append(rest, n4) {
		waitVoters(t, s.api, 3)
	}
	byID := map[string]*server{rest[0].name: rest[0], rest[1].name: rest[1], "n4": n4}
	caughtUp(t, n4, byID)
	if tok := getToken(t, n4.api, "svc/a"); tok != l.Token {
		t.Fatalf("n4 sees svc/a at token %d, want %d", tok, l.Token)
	}
	wantValue(t, n4.api, "svc/a/v", "x", l.Token)
	if tok := acquireJSON(t, n4.api, "svc/b", "--ttl", "1h").Token; tok <= l.Token {
		t.Fatalf("token after the replacement %d is not above %d", tok, l.Token)
	}
	checkLogDocumented(t, rest[0], rest[1], n4)
}

// TestRollingUpgrade runs the procedure "Rolling upgrade" of
// docs/operations.md: each member in turn, followers first and the
// leader last, is stopped with SIGTERM and started again (the new
// binary, in a real upgrade), and the next waits until it is a voter
// again and has caught up. Leases, values and tokens survive, and the
// cluster serves between the steps.
func TestRollingUpgrade(t *testing.T) {
	ns := startThree(t)
	all := ns[0].api + "," + ns[1].api + "," + ns[2].api
	byID := map[string]*server{}
	for _, s := range ns {
		byID[s.name] = s
	}
	l := acquireJSON(t, all, "job", "--holder", "w", "--ttl", "1h")
	mustCode(t, 0, cli(t, all, "kv", "put", "job/v", "x", "--lease", "job", "--token", fmt.Sprint(l.Token)), "kv put")
	st := waitVoters(t, all, 3)
	order := []*server{}
	for _, s := range ns {
		if s.name != st.Leader {
			order = append(order, s)
		}
	}
	order = append(order, byID[st.Leader])
	last := l.Token
	for _, s := range order {
		if code := s.stop(); code != 0 {
			t.Fatalf("%s exited %d on SIGTERM", s.name, code)
		}
		tok := acquireJSON(t, all, "during/"+s.name, "--ttl", "1h").Token
		if tok <= last {
			t.Fatalf("token while %s was down: %d, not above %d", s.name, tok, last)
		}
		last = tok
		s.start()
		waitVoters(t, s.api, 3)
		caughtUp(t, s, byID)
	}
	if tok := getToken(t, all, "job"); tok != l.Token {
		t.Fatalf("after the upgrade job has token %d, want %d", tok, l.Token)
	}
	wantValue(t, all, "job/v", "x", l.Token)
	if tok := acquireJSON(t, all, "after", "--ttl", "1h").Token; tok <= last {
		t.Fatalf("token after the upgrade %d is not above %d", tok, last)
	}
	checkLogDocumented(t, ns...)
}

var (
	logMsg   = regexp.MustCompile(`(?m)^time=\S+ level=(\w+) msg=("(?:[^"\\]|\\.)*"|\S+)(.*)$`)
	docEntry = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
)

// checkLogDocumented checks that every message tenured's own logger
// (not raft's) wrote in the logs of servers is explained in the table of
// docs/operations.md ("What the log says"): some entry of the table is
// the message or begins it.
func checkLogDocumented(t *testing.T, servers ...*server) {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, m := range docEntry.FindAllStringSubmatch(string(doc), -1) {
		entries = append(entries, m[1])
	}
	if len(entries) < 20 {
		t.Fatalf("docs/operations.md explains only %d log messages", len(entries))
	}
	for _, s := range servers {
		ms := logMsg.FindAllStringSubmatch(s.log.String(), -1)
		if len(ms) == 0 {
			t.Errorf("found no log messages in the log of %s:\n%s", s.name, s.log.String())
		}
		for _, m := range ms {
			if strings.Contains(m[3], "logger=raft") {
				continue
			}
			msg := m[2]
			if strings.HasPrefix(msg, `"`) {
				if msg, err = strconv.Unquote(msg); err != nil {
					t.Fatalf("log message %s: %v", m[2], err)
				}
			}
			if !slices.ContainsFunc(entries, func(e string) bool { return strings.HasPrefix(msg, e) }) {
				t.Errorf("docs/operations.md does not explain the log message %q (level %s) of %s", msg, m[1], s.name)
			}
		}
	}
}
