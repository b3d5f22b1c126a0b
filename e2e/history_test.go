package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// jsonTerm is a line of `tenure history -o json`.
type jsonTerm struct {
	Name           string `json:"name"`
	Holder         string `json:"holder"`
	Token          uint64 `json:"token"`
	Start          string `json:"start"`
	End            string `json:"end"`
	Held           string `json:"held"`
	Ending         string `json:"ending"`
	Reason         string `json:"reason"`
	WritesAccepted uint64 `json:"writes_accepted"`
	WritesRefused  uint64 `json:"writes_refused"`
}

// historyJSON runs `tenure history ARGS -o json` and decodes its lines.
func historyJSON(t *testing.T, endpoints string, args ...string) []jsonTerm {
	t.Helper()
	r := cli(t, endpoints, append([]string{"history", "-o", "json"}, args...)...)
	mustCode(t, 0, r, "tenure history "+strings.Join(args, " "))
	var out []jsonTerm
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var tm jsonTerm
		if err := json.Unmarshal([]byte(line), &tm); err != nil {
			t.Fatalf("history line %q: %v", line, err)
		}
		out = append(out, tm)
	}
	return out
}

// wantTerm is what a term must show: holder, token, ending, writes.
type wantTerm struct {
	holder           string
	token            uint64
	ending           string
	reason           string
	accepted, refuse uint64
}

func checkHistory(t *testing.T, what string, got []jsonTerm, want []wantTerm) {
	t.Helper()
	var b strings.Builder
	for _, g := range got {
		fmt.Fprintf(&b, "\n  %+v", g)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d terms, want %d (newest first):%s", what, len(got), len(want), b.String())
	}
	for i, w := range want {
		g := got[i]
		if g.Name != "jobs/nightly" || g.Holder != w.holder || g.Token != w.token || g.Ending != w.ending || g.Reason != w.reason ||
			g.WritesAccepted != w.accepted || g.WritesRefused != w.refuse || g.Start == "" || (w.ending != "held") != (g.End != "") {
			t.Fatalf("%s: term %d is %+v, want %+v; all:%s", what, i, g, w, b.String())
		}
	}
}

// TestHistorySurvivesFailoverAndRestarts is the done-when of the lease
// history: terms that ended released, expired and revoked, and one
// held, each with its token and fenced writes; after the leader is
// killed and after every node is restarted, `tenure history` on any
// node shows every one of them.
func TestHistorySurvivesFailoverAndRestarts(t *testing.T) {
	ns := startThree(t)
	all := ns[0].api + "," + ns[1].api + "," + ns[2].api
	byID := map[string]*server{}
	for _, s := range ns {
		byID[s.name] = s
	}
	const name = "jobs/nightly"
	put := func(token uint64, code int) {
		t.Helper()
		mustCode(t, code, cli(t, all, "kv", "put", "nightly/out", "v", "--lease", name, "--token", fmt.Sprint(token)), "kv put")
	}

	// Released, after two writes.
	a := acquireJSON(t, all, name, "--holder", "a", "--ttl", "30s")
	put(a.Token, 0)
	put(a.Token, 0)
	mustCode(t, 0, cli(t, all, "release", name, "--token", fmt.Sprint(a.Token)), "release")
	// Expired, after one write; a write after the expiry is refused.
	b := acquireJSON(t, all, name, "--holder", "b", "--ttl", "2s")
	put(b.Token, 0)
	eventually(t, "b's grant to expire", 30*time.Second, func() error {
		if r := cli(t, all, "get", name); r.code != 6 {
			return fmt.Errorf("get: %v", r)
		}
		return nil
	})
	put(b.Token, 4)
	// Revoked by an operator.
	c := acquireJSON(t, all, name, "--holder", "c", "--ttl", "30s")
	mustCode(t, 0, cli(t, all, "revoke", name, "--reason", "stuck on a bad disk"), "revoke")
	put(c.Token, 4)
	// Held, long enough to outlast the restarts (cluster time stands
	// still while there is no leader).
	d := acquireJSON(t, all, name, "--holder", "d", "--ttl", "2m")
	put(d.Token, 0)

	want := []wantTerm{
		{"d", d.Token, "held", "", 1, 0},
		{"c", c.Token, "revoked", "stuck on a bad disk", 0, 1},
		{"b", b.Token, "expired", "", 1, 1},
		{"a", a.Token, "released", "", 2, 0},
	}
	checkHistory(t, "before the failover", historyJSON(t, all, name), want)

	// Who held it while b's grant was live, and with which token.
	terms := historyJSON(t, all, name)
	bStart, err := time.Parse(time.RFC3339Nano, terms[2].Start)
	if err != nil {
		t.Fatal(err)
	}
	at := historyJSON(t, all, name, "--at", bStart.Add(time.Second).Format(time.RFC3339Nano))
	if len(at) != 1 || at[0].Holder != "b" || at[0].Token != b.Token {
		t.Fatalf("history --at one second into b's term: %+v, want b's term alone", at)
	}
	if r := cli(t, all, "history", name); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%s token %d held by c from ", name, c.Token)) ||
		!strings.Contains(r.stdout, "revoked: stuck on a bad disk") {
		t.Fatalf("history as text: %v", r)
	}

	// Kill the leader: the two others elect a new one and know every term.
	st := waitVoters(t, all, 3)
	leader := byID[st.Leader]
	leader.kill()
	var rest []*server
	for _, s := range ns {
		if s != leader {
			rest = append(rest, s)
		}
	}
	eventually(t, "a new leader among the survivors", 30*time.Second, func() error {
		st, err := status(t, rest[0].api)
		if err != nil {
			return err
		}
		if st.Leader == "" || st.Leader == leader.name {
			return fmt.Errorf("leader %q", st.Leader)
		}
		return nil
	})
	for _, s := range rest {
		checkHistory(t, "after the failover, from "+s.name, historyJSON(t, s.api, name), want)
	}

	// Restart every node: the killed one, then all three.
	leader.start()
	leader.waitReady(30 * time.Second)
	for _, s := range ns {
		caughtUp(t, s, byID)
	}
	for _, s := range ns {
		s.stop()
	}
	for _, s := range ns {
		s.start()
	}
	for _, s := range ns {
		s.waitReady(30 * time.Second)
	}
	for _, s := range ns {
		caughtUp(t, s, byID)
		checkHistory(t, "after restarting every node, from "+s.name, historyJSON(t, s.api, name), want)
	}
	// The dashboard's timeline reads the same history, oldest first.
	for _, s := range ns {
		h := history(t, s, name)
		var got []string
		for _, tm := range h.Terms {
			got = append(got, fmt.Sprintf("%s/%d/%s", tm.Holder, tm.Token, tm.Ended))
		}
		wantUI := fmt.Sprintf("[a/%d/released b/%d/expired c/%d/revoked d/%d/]", a.Token, b.Token, c.Token, d.Token)
		if fmt.Sprint(got) != wantUI {
			t.Fatalf("the dashboard's history from %s after the restarts: %v, want %s", s.name, got, wantUI)
		}
	}
	// --limit keeps the newest.
	if got := historyJSON(t, all, name, "--limit", "2"); len(got) != 2 || got[0].Holder != "d" || got[1].Holder != "c" {
		t.Fatalf("history --limit 2: %+v, want d's and c's terms", got)
	}
	// An empty answer says so on stderr (stdout stays a list of terms).
	if r := cli(t, all, "history", "never/held"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no term of never/held in the kept history") {
		t.Errorf("history of a name never held: %v, want exit 0, nothing on stdout and a note on stderr", r)
	}
	if r := cli(t, all, "history", name, "--at", "2000-01-01T00:00:00Z"); r.code != 0 || r.stdout != "" ||
		!strings.Contains(r.stderr, "nobody held "+name+" at 2000-01-01T00:00:00Z") {
		t.Errorf("history --at a time nobody held it: %v, want exit 0 and a note on stderr", r)
	}
	// Bad input is refused with exit 2.
	for _, args := range [][]string{{"history"}, {"history", name, "--since", "yesterday"}, {"history", name, "--limit", "-1"}} {
		if r := cli(t, all, args...); r.code != 2 {
			t.Errorf("tenure %s: %v, want exit 2", strings.Join(args, " "), r)
		}
	}
}
