package server_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/testcluster"
)

func uiGet(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// sseEvent is one Server-Sent Event of the dashboard's stream.
type sseEvent struct {
	name string
	data string
}

// readSSE sends the events of the stream at url to the returned channel
// until the test ends.
func readSSE(t *testing.T, url string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %s, %s", url, res.Status, res.Header.Get("Content-Type"))
	}
	ch := make(chan sseEvent, 100)
	done := make(chan struct{})
	t.Cleanup(func() {
		res.Body.Close()
		<-done
	})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			case line == "":
				select {
				case ch <- ev:
				default:
				}
				ev = sseEvent{}
			}
		}
	}()
	return ch
}

// waitSSE returns the first event named name for which ok is true.
func waitSSE(t *testing.T, ch <-chan sseEvent, name string, ok func(data string) bool) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.name == name && ok(ev.data) {
				return ev.data
			}
		case <-deadline:
			t.Fatalf("no %q event as wanted within 10s", name)
		}
	}
}

// A follower's dashboard stream starts with the state, then carries the
// grants from the Watch stream and the fenced writes, accepted and
// rejected, from the follower's own activity log; the history of the name
// shows both terms and the rejected write.
func TestUIStreamOnFollower(t *testing.T) {
	c, leader, _ := cluster(t)
	var fol string
	for _, m := range c.Members() {
		if m != c.Leader() {
			fol = "http://" + m.Addr
			break
		}
	}
	ctx := ctxT(t)
	began := time.Now()
	events := readSSE(t, fol+"/ui/api/stream")
	snap := waitSSE(t, events, "snapshot", func(string) bool { return true })
	if !strings.Contains(snap, `"leases":[]`) {
		t.Errorf("snapshot of an empty cluster = %s", snap)
	}

	a, err := leader.lease.Acquire(ctx, acquireReq("ui/fenced", "A", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ta := a.Msg.GetLease().GetToken()
	waitSSE(t, events, "leases", func(d string) bool {
		return strings.Contains(d, `"type":"granted"`) && strings.Contains(d, `"holder":"A"`)
	})
	put := func(value string, token uint64) error {
		_, err := leader.kv.Put(ctx, connect.NewRequest(&tenurev1.KVPutRequest{Key: "k", Value: []byte(value), Lease: "ui/fenced", Token: token}))
		return err
	}
	if err := put("A-1", ta); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.lease.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Name: "ui/fenced", Token: ta})); err != nil {
		t.Fatal(err)
	}
	b, err := leader.lease.Acquire(ctx, acquireReq("ui/fenced", "B", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tb := b.Msg.GetLease().GetToken()
	if err := put("A-2", ta); err == nil {
		t.Fatal("a write with the released token was accepted")
	}
	data := waitSSE(t, events, "activity", func(d string) bool { return strings.Contains(d, `"kind":"write_rejected"`) })
	var act struct {
		Activities []struct {
			Kind, Name, Error string
			Token             uint64
			Wall              int64
		}
	}
	if err := json.Unmarshal([]byte(data), &act); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range act.Activities {
		if x.Kind == "write_rejected" {
			found = true
			if x.Token != ta || x.Name != "ui/fenced" || !strings.Contains(x.Error, "stale token") {
				t.Errorf("rejected write = %+v, want token %d on ui/fenced", x, ta)
			}
			// The wall-clock time of the entry, as the leader appended
			// it, reached the follower (the page shows it).
			if !wallBetween(x.Wall, began, time.Now()) {
				t.Errorf("rejected write's wall time = %v, want between %v and now", time.UnixMilli(x.Wall), began)
			}
		}
	}
	if !found {
		t.Error("no rejected write in the activity")
	}

	_, body := uiGet(t, fol+"/ui/api/history?name=ui/fenced")
	var h struct {
		Terms []struct {
			Token     uint64
			Ended     string
			Writes    int
			StartWall int64 `json:"start_wall"`
			EndWall   int64 `json:"end_wall"`
		}
		Stale []struct {
			Token, Current uint64
			Wall           int64
		}
	}
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Terms) != 2 || h.Terms[0].Token != ta || h.Terms[0].Ended != "released" || h.Terms[0].Writes != 1 ||
		h.Terms[1].Token != tb || h.Terms[1].Ended != "" {
		t.Errorf("terms = %+v, want A's (token %d, released, 1 write) then B's (token %d, held)", h.Terms, ta, tb)
	}
	if len(h.Stale) != 1 || h.Stale[0].Token != ta || h.Stale[0].Current != tb {
		t.Errorf("stale = %+v, want token %d refused while %d held", h.Stale, ta, tb)
	}
	// A renewal of B's grant in the log reaches the page with the next
	// tick: its new expiry (the Watch stream carries no renewals). It
	// changes the TTL, so that it goes to the log: one the leader
	// answers from memory is not seen here, and changes nothing a
	// follower shows (it shows when the cluster keeps the grant until).
	var state struct {
		Leases []struct {
			Name      string
			Token     uint64
			ExpiresAt float64 `json:"expires_at"`
		}
	}
	_, body = uiGet(t, fol+"/ui/api/state?prefix=ui/")
	if err := json.Unmarshal(body, &state); err != nil || len(state.Leases) != 1 || state.Leases[0].Token != tb {
		t.Fatalf("state = %s (%v), want B's grant", body, err)
	}
	if _, err := leader.lease.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: "ui/fenced", Token: tb, Ttl: durationpb.New(3 * time.Second)}}})); err != nil {
		t.Fatal(err)
	}
	data = waitSSE(t, events, "tick", func(d string) bool { return strings.Contains(d, `"renewed":[`) })
	var tick struct {
		Renewed []struct {
			Name      string
			Token     uint64
			ExpiresAt float64 `json:"expires_at"`
		}
	}
	if err := json.Unmarshal([]byte(data), &tick); err != nil {
		t.Fatal(err)
	}
	if len(tick.Renewed) != 1 || tick.Renewed[0].Name != "ui/fenced" || tick.Renewed[0].Token != tb || tick.Renewed[0].ExpiresAt <= state.Leases[0].ExpiresAt {
		t.Errorf("tick after the renewal carries %+v, want ui/fenced token %d expiring after %v", tick.Renewed, tb, state.Leases[0].ExpiresAt)
	}

	if len(h.Terms) == 2 && len(h.Stale) == 1 {
		end := time.Now()
		if w := h.Terms[0]; !wallBetween(w.StartWall, began, end) || !wallBetween(w.EndWall, began, end) || w.EndWall < w.StartWall {
			t.Errorf("A's term has wall times %d to %d, want in order between %v and %v", w.StartWall, w.EndWall, began, end)
		}
		if w := h.Terms[1]; !wallBetween(w.StartWall, began, end) || w.EndWall != 0 {
			t.Errorf("B's term has wall times %d to %d, want a start between %v and %v and no end", w.StartWall, w.EndWall, began, end)
		}
		if w := h.Stale[0].Wall; !wallBetween(w, began, end) {
			t.Errorf("the stale write's wall time is %d, want between %v and %v", w, began, end)
		}
	}
}

// wallBetween says whether the Unix milliseconds ms are within [from, to]
// (to the millisecond).
func wallBetween(ms int64, from, to time.Time) bool {
	return ms >= from.Truncate(time.Millisecond).UnixMilli() && ms <= to.UnixMilli()
}

// The cluster view asks every member for its status: all three are
// reachable, one of them marked leader by all. Under load (the race
// detector beside other work) an election can move the leadership, or a
// member's probe can run past its 700ms timeout, between the test's look
// at the leader and a member's answer; the test then looks again, and
// fails if five looks in a row find the views wrong.
func TestUIClusterView(t *testing.T) {
	c, _, _ := cluster(t)
	var problems []string
	for attempt := 1; attempt <= 5; attempt++ {
		problems = clusterViewProblems(t, c)
		if len(problems) == 0 {
			return
		}
		t.Logf("look %d at the cluster view: %s", attempt, strings.Join(problems, "; "))
	}
	t.Errorf("the cluster view was wrong five times in a row; the last time:\n%s", strings.Join(problems, "\n"))
}

// clusterViewProblems asks every member of c for its cluster view and
// says what is wrong with each, given the leader c sees.
func clusterViewProblems(t *testing.T, c *testcluster.Cluster) []string {
	var problems []string
	leader := c.Leader()
	for _, m := range c.Members() {
		_, body := uiGet(t, "http://"+m.Addr+"/ui/api/cluster")
		var cv struct {
			Node     string
			LeaderID string `json:"leader_id"`
			Members  []struct {
				ID          string
				Reachable   bool
				Leader      bool
				Self        bool
				State       string
				Term        uint64
				Applied     uint64  `json:"applied_index"`
				LastContact float64 `json:"last_contact_ms_ago"`
			}
		}
		if err := json.Unmarshal(body, &cv); err != nil {
			t.Fatal(err)
		}
		if cv.Node != m.ID || cv.LeaderID != leader.ID || len(cv.Members) != 3 {
			problems = append(problems, fmt.Sprintf("%s: cluster = %+v, want node %s, leader %s, 3 members", m.ID, cv, m.ID, leader.ID))
			continue
		}
		for _, um := range cv.Members {
			if !um.Reachable || um.Term == 0 || um.Applied == 0 {
				problems = append(problems, fmt.Sprintf("%s sees %s as %+v", m.ID, um.ID, um))
			}
			if want := um.ID == leader.ID; um.Leader != want || (um.State == "leader") != want {
				problems = append(problems, fmt.Sprintf("%s sees %s as leader=%v state %s", m.ID, um.ID, um.Leader, um.State))
			}
			if um.Self != (um.ID == m.ID) || (!um.Self && um.LastContact < 0) {
				problems = append(problems, fmt.Sprintf("%s sees %s as self=%v, last contact %v", m.ID, um.ID, um.Self, um.LastContact))
			}
		}
	}
	return problems
}

// The page and its assets are served from the binary; every data route
// goes through uiHandler (which marks its answers no-store); a history
// without a name is refused with what to send instead.
func TestUIRoutes(t *testing.T) {
	c, _, _ := cluster(t)
	base := "http://" + c.Leader().Addr
	res, body := uiGet(t, base+"/ui")
	if res.StatusCode != 200 || !strings.Contains(string(body), `<script type="module" src="app.js">`) {
		t.Fatalf("GET /ui: %s %.200s", res.Status, body)
	}
	for path, ctype := range map[string]string{"/ui/app.js": "text/javascript", "/ui/app.css": "text/css"} {
		res, body := uiGet(t, base+path)
		if res.StatusCode != 200 || len(body) < 1000 || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %s, %s, %d bytes", path, res.Status, res.Header.Get("Content-Type"), len(body))
		}
	}
	for _, path := range []string{"state", "history?name=x", "history?prefix=", "cluster", "metrics"} {
		res, body := uiGet(t, base+"/ui/api/"+path)
		if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-store" || !json.Valid(body) {
			t.Errorf("GET /ui/api/%s: %s, Cache-Control %q, %.100s", path, res.Status, res.Header.Get("Cache-Control"), body)
		}
	}
	res, body = uiGet(t, base+"/ui/api/history")
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "?name=NAME") {
		t.Errorf("GET /ui/api/history: %s %s", res.Status, body)
	}
}

// With authentication on, the dashboard's data is checked like the API:
// no credentials get 401, a principal without read on the prefix 403, a
// read principal the data; the cluster view reaches the other members.
func TestUIRespectsAuth(t *testing.T) {
	s := startSecure(t)
	m := s.follower()
	tc := &tls.Config{RootCAs: x509.NewCertPool()}
	tc.RootCAs.AddCert(s.ca.Cert)
	tr := &http.Transport{TLSClientConfig: tc}
	t.Cleanup(tr.CloseIdleConnections)
	// A refusal answers at once; an accepted stream would run until the
	// timeout, and fail.
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(path, principal string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "https://"+m.Addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if principal != "" {
			req.Header.Set("Authorization", "Bearer "+s.tokens[principal])
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	for _, c := range []struct {
		path, principal string
		want            int
	}{
		{"/ui/api/state", "", http.StatusUnauthorized},
		{"/ui/api/stream", "", http.StatusUnauthorized},
		{"/ui/api/cluster", "", http.StatusUnauthorized},
		{"/ui/api/state", "jobsonly", http.StatusForbidden},
		{"/ui/api/history?name=other", "jobsonly", http.StatusForbidden},
		{"/ui/api/state?prefix=jobs/", "jobsonly", http.StatusOK},
		{"/ui/api/history?name=jobs/x", "jobsonly", http.StatusOK},
		{"/ui/api/state", "reader", http.StatusOK},
		{"/ui/api/history?prefix=", "reader", http.StatusOK},
		{"/ui/api/metrics", "reader", http.StatusOK},
		{"/ui/", "", http.StatusOK}, // the page itself: it asks for a token
	} {
		if got, body := get(c.path, c.principal); got != c.want {
			t.Errorf("GET %s as %q: %d %s, want %d", c.path, c.principal, got, body, c.want)
		}
	}
	code, body := get("/ui/api/cluster", "reader")
	if code != http.StatusOK {
		t.Fatalf("cluster as reader: %d %s", code, body)
	}
	var cv struct {
		Members []struct {
			ID        string
			Reachable bool
			Error     string
		}
	}
	if err := json.Unmarshal([]byte(body), &cv); err != nil {
		t.Fatal(err)
	}
	for _, um := range cv.Members {
		if !um.Reachable {
			t.Errorf("member %s unreachable from the dashboard: %s", um.ID, um.Error)
		}
	}
}
