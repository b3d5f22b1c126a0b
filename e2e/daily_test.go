package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// The daily-use commands of the CLI (issue 12), each run as a real
// process against a real single-node server.

func TestRenewWithTTL(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	a := acquireJSON(t, ep, "jobs/ttl", "--holder", "a", "--ttl", "5s")

	r := cli(t, ep, "renew", "jobs/ttl", "--token", fmt.Sprint(a.Token), "--ttl", "30s", "-o", "json")
	mustCode(t, 0, r, "renew --ttl 30s")
	if !strings.Contains(r.stdout, fmt.Sprintf(`"token":%d,"ttl":"30s"`, a.Token)) {
		t.Fatalf("renew --ttl 30s printed %q, want the same token with ttl 30s", r.stdout)
	}
	// The grant keeps its new TTL for plain renewals.
	r = cli(t, ep, "renew", "jobs/ttl", "--token", fmt.Sprint(a.Token), "-o", "json")
	mustCode(t, 0, r, "renew")
	if !strings.Contains(r.stdout, `"ttl":"30s"`) {
		t.Fatalf("plain renew printed %q, want ttl 30s", r.stdout)
	}
	// Below the server's minimum: the server's bounds, exit 2, no change.
	r = cli(t, ep, "renew", "jobs/ttl", "--token", fmt.Sprint(a.Token), "--ttl", "100ms")
	mustCode(t, 2, r, "renew --ttl 100ms")
	if !strings.Contains(r.stderr, "below the minimum") {
		t.Fatalf("renew --ttl 100ms: %v, want the server's minimum named", r)
	}
	// Above 24h: refused before anything is sent.
	r = cli(t, ep, "renew", "jobs/ttl", "--token", fmt.Sprint(a.Token), "--ttl", "25h")
	mustCode(t, 2, r, "renew --ttl 25h")
	if !strings.Contains(r.stderr, "--ttl") || !strings.Contains(r.stderr, "up to 24h") {
		t.Fatalf("renew --ttl 25h: %v, want the flag and the range", r)
	}
	r = cli(t, ep, "get", "jobs/ttl", "-o", "json")
	if !strings.Contains(r.stdout, `"ttl":"30s"`) {
		t.Fatalf("get after the refused renewals: %v, want ttl 30s", r)
	}
}
