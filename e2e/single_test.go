package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// kvGet runs `tenure kv get KEY -o json` and returns the decoded object.
func kvGet(t *testing.T, endpoints, key string) map[string]any {
	t.Helper()
	r := cli(t, endpoints, "kv", "get", key, "-o", "json")
	mustCode(t, 0, r, "kv get "+key)
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &m); err != nil {
		t.Fatalf("kv get output %q: %v", r.stdout, err)
	}
	return m
}

func wantValue(t *testing.T, endpoints, key, value string, token uint64) {
	t.Helper()
	m := kvGet(t, endpoints, key)
	if m["value"] != value || m["token"] != float64(token) {
		t.Fatalf("kv get %s = %v, want value %q written with token %d", key, m, value, token)
	}
}

func TestSingleNodeLeaseLifecycle(t *testing.T) {
	s := startSingle(t)
	ep := s.api

	a := acquireJSON(t, ep, "jobs/nightly", "--holder", "a", "--ttl", "5s")
	if a.Holder != "a" || a.TTL != "5s" {
		t.Fatalf("acquire by a: %+v", a)
	}

	// A second holder is refused with exit 3 and told who holds it.
	r := cli(t, ep, "acquire", "jobs/nightly", "--holder", "b", "--ttl", "5s")
	mustCode(t, 3, r, "acquire by b while a holds")
	if !strings.Contains(r.stderr, `a`) || !strings.Contains(r.stderr, "held") {
		t.Fatalf("held message does not name the holder: %v", r)
	}

	// Re-acquire by the holder is a renewal with the same token.
	if again := acquireJSON(t, ep, "jobs/nightly", "--holder", "a", "--ttl", "5s"); again.Token != a.Token {
		t.Fatalf("re-acquire by a gave token %d, want %d", again.Token, a.Token)
	}
	mustCode(t, 0, cli(t, ep, "renew", "jobs/nightly", "--token", fmt.Sprint(a.Token)), "renew")

	mustCode(t, 0, cli(t, ep, "kv", "put", "reports/latest", "from-a", "--lease", "jobs/nightly", "--token", fmt.Sprint(a.Token)), "put by a")
	mustCode(t, 0, cli(t, ep, "release", "jobs/nightly", "--token", fmt.Sprint(a.Token)), "release by a")
	mustCode(t, 7, cli(t, ep, "release", "jobs/nightly", "--token", fmt.Sprint(a.Token)), "second release by a")

	b := acquireJSON(t, ep, "jobs/nightly", "--holder", "b", "--ttl", "5s")
	if b.Token <= a.Token {
		t.Fatalf("b's token %d is not larger than a's %d", b.Token, a.Token)
	}

	// a's late write with the old token is fenced off; nothing changes.
	r = cli(t, ep, "kv", "put", "reports/latest", "late-a", "--lease", "jobs/nightly", "--token", fmt.Sprint(a.Token))
	mustCode(t, 4, r, "stale put by a")
	wantValue(t, ep, "reports/latest", "from-a", a.Token)
	mustCode(t, 0, cli(t, ep, "kv", "put", "reports/latest", "from-b", "--lease", "jobs/nightly", "--token", fmt.Sprint(b.Token)), "put by b")
	wantValue(t, ep, "reports/latest", "from-b", b.Token)

	// get and list show the current grant.
	r = cli(t, ep, "get", "jobs/nightly", "-o", "json")
	mustCode(t, 0, r, "get")
	if !strings.Contains(r.stdout, fmt.Sprintf(`"token":%d`, b.Token)) {
		t.Fatalf("get shows %q, want token %d", r.stdout, b.Token)
	}
	r = cli(t, ep, "list", "jobs/", "-o", "json")
	mustCode(t, 0, r, "list")
	if !strings.Contains(r.stdout, `"holder":"b"`) {
		t.Fatalf("list shows %q, want b's lease", r.stdout)
	}

	// After the TTL passes the lease expires by itself and a third holder
	// gets a larger token. A waiting acquire is granted as soon as the
	// expiry commits.
	c := acquireJSON(t, ep, "jobs/nightly", "--holder", "c", "--ttl", "5s", "--wait", "--timeout", "20s")
	if c.Token <= b.Token {
		t.Fatalf("c's token %d is not larger than b's %d", c.Token, b.Token)
	}
	mustCode(t, 6, cli(t, ep, "get", "jobs/missing"), "get of a missing lease")
}

func TestJSONOverHTTP(t *testing.T) {
	s := startSingle(t)
	post := func(body string) (int, string) {
		res, err := http.Post("http://"+s.api+"/tenure.v1.LeaseService/Acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := post(`{"name":"x","holder":"h","ttl":"5s"}`)
	if code != 200 || !strings.Contains(body, `"holder":"h"`) || !strings.Contains(body, `"token":"1"`) {
		t.Fatalf("JSON acquire: %d %s", code, body)
	}
	code, body = post(`{"name":"x","holder":"other","ttl":"5s"}`)
	if code != 412 && code != 400 || !strings.Contains(body, "failed_precondition") {
		t.Fatalf("JSON acquire by another holder: %d %s", code, body)
	}
	code, body = post(`{"name":"x",`)
	if code != 400 || !strings.Contains(body, "invalid_argument") {
		t.Fatalf("malformed JSON: %d %s", code, body)
	}
	code, body = post(`{"name":"","holder":"h","ttl":"5s"}`)
	if code != 400 || !strings.Contains(body, "invalid_argument") {
		t.Fatalf("empty name: %d %s", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		res, err := http.Get("http://" + s.api + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, res.Status)
		}
		if path == "/metrics" && !strings.Contains(string(b), `tenure_lease_events_total{type="granted"} 1`) {
			t.Fatalf("metrics do not count the grant:\n%s", b)
		}
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	a := acquireJSON(t, ep, "held", "--holder", "a", "--ttl", "10s")
	mustCode(t, 0, cli(t, ep, "kv", "put", "k", "v1", "--lease", "held", "--token", fmt.Sprint(a.Token)), "put")

	long := strings.Repeat("n", 257)
	cases := []struct {
		name string
		args []string
	}{
		{"empty name", []string{"acquire", "", "--holder", "x"}},
		{"oversized name", []string{"acquire", long, "--holder", "x"}},
		{"oversized holder", []string{"acquire", "n", "--holder", strings.Repeat("h", 129)}},
		{"ttl zero", []string{"acquire", "n", "--ttl", "0s"}},
		{"ttl below minimum", []string{"acquire", "n", "--ttl", "100ms"}},
		{"ttl above 24h", []string{"acquire", "n", "--ttl", "25h"}},
		{"ttl not a duration", []string{"acquire", "n", "--ttl", "abc"}},
		{"unknown flag", []string{"acquire", "n", "--bogus"}},
		{"missing name", []string{"acquire"}},
		{"token not a number", []string{"renew", "held", "--token", "x"}},
		{"token zero", []string{"release", "held", "--token", "0"}},
		{"unknown command", []string{"frobnicate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := cli(t, ep, c.args...)
			mustCode(t, 2, r, c.name)
			if strings.TrimSpace(r.stderr) == "" {
				t.Fatalf("%s: no error message", c.name)
			}
		})
	}
	t.Run("value over the limit", func(t *testing.T) {
		big := strings.Repeat("v", 1<<20+1)
		r := cliStdin(t, ep, strings.NewReader(big), "kv", "put", "k", "-", "--lease", "held", "--token", fmt.Sprint(a.Token))
		mustCode(t, 2, r, "value over the limit")
		if !strings.Contains(r.stderr, "limit") {
			t.Fatalf("message does not mention the limit: %v", r)
		}
	})
	// Nothing changed, and the server still serves.
	wantValue(t, ep, "k", "v1", a.Token)
	r := cli(t, ep, "get", "held", "-o", "json")
	mustCode(t, 0, r, "get after bad input")
	if !strings.Contains(r.stdout, fmt.Sprintf(`"token":%d`, a.Token)) {
		t.Fatalf("lease changed: %s", r.stdout)
	}
	if n := acquireJSON(t, ep, "fresh", "--holder", "z", "--ttl", "5s"); n.Token != a.Token+1 {
		t.Fatalf("next token %d, want %d: a rejected request used a token", n.Token, a.Token+1)
	}
}

func TestRestartKeepsState(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	var max uint64
	for i := range 5 {
		l := acquireJSON(t, ep, fmt.Sprintf("jobs/%d", i), "--holder", "a", "--ttl", "1h")
		mustCode(t, 0, cli(t, ep, "kv", "put", fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), "--lease", l.Name, "--token", fmt.Sprint(l.Token)), "put")
		max = l.Token
	}
	s.kill() // SIGKILL: no chance to flush anything not already durable
	s.start()
	s.waitReady(20 * time.Second)
	for i := range 5 {
		r := cli(t, ep, "get", fmt.Sprintf("jobs/%d", i), "-o", "json")
		mustCode(t, 0, r, "get after restart")
		wantValue(t, ep, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), uint64(i+1))
	}
	if l := acquireJSON(t, ep, "after-restart", "--holder", "b", "--ttl", "5s"); l.Token <= max {
		t.Fatalf("token after restart %d is not larger than %d", l.Token, max)
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("tenured exited %d after SIGTERM", code)
	}
}
