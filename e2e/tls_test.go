package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cliEnv runs the tenure CLI with env added to the environment.
func cliEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return runCLI(t, env, nil, args...)
}

// The README's walk-through on a three-node cluster with TLS on the API,
// mutual TLS between members and an auth file, from certificates and
// tokens made by the CLI: acquire, a fenced put, release, run, a leader
// killed under a held lease; and what it refuses (exit 5), with nothing
// changed.
func TestTLSClusterWithAuth(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	authFile := filepath.Join(dir, "auth.json")
	if r := cliEnv(t, nil, "certs", "init", certs, "--members", "n1,n2,n3"); r.code != 0 {
		t.Fatalf("certs init: %v", r)
	}
	if fi, err := os.Stat(filepath.Join(certs, "n1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("n1.key: %v, mode %v; want 0600", err, fi.Mode())
	}
	if r := cliEnv(t, nil, "certs", "init", certs, "--members", "n1"); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("certs init over existing files: %v, want exit 1 and a refusal", r)
	}
	token := func(name string, roles ...string) string { return authToken(t, authFile, name, roles...) }
	opsTok, appTok, otherTok := token("ops", "admin"), token("app", "hold:jobs/", "read:"), token("other", "hold:jobs/", "read:")
	if data, _ := os.ReadFile(authFile); bytes.Contains(data, []byte(appTok)) {
		t.Fatal("the auth file holds a token, not its hash")
	}

	secure := func(id string) []string {
		c := func(f string) string { return filepath.Join(certs, f) }
		return []string{"--election-timeout", "300ms",
			"--tls-cert", c(id + ".crt"), "--tls-key", c(id + ".key"), "--client-ca", c("client-ca.crt"),
			"--peer-cert", c(id + ".crt"), "--peer-key", c(id + ".key"), "--peer-ca", c("ca.crt"),
			"--auth-file", authFile}
	}
	n1 := newServer(t, "n1", "", secure("n1")...)
	n1.start()
	n1.waitReady(20 * time.Second)
	n2 := newServer(t, "n2", n1.api, secure("n2")...)
	n3 := newServer(t, "n3", n1.api, secure("n3")...)
	n2.start()
	n3.start()
	servers := []*server{n1, n2, n3}
	all := n1.api + "," + n2.api + "," + n3.api
	base := []string{"TENURE_ENDPOINTS=" + all, "TENURE_CACERT=" + filepath.Join(certs, "ca.crt")}
	as := func(tok string) []string { return append(append([]string{}, base...), "TENURE_AUTH_TOKEN="+tok) }
	eventually(t, "three voters over TLS", 60*time.Second, func() error {
		r := cliEnv(t, as(opsTok), "status", "-o", "json", "--endpoints", n1.api)
		if r.code != 0 {
			return fmt.Errorf("%v", r)
		}
		var st jsonStatus
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			return err
		}
		voters := 0
		for _, m := range st.Members {
			if m.Suffrage == "voter" {
				voters++
			}
		}
		if voters != 3 || st.Leader == "" {
			return fmt.Errorf("%d voters, leader %q", voters, st.Leader)
		}
		return nil
	})

	// The walk-through, as app. The lease outlives the refused requests
	// below, each a few CLI runs with a TLS handshake: a loaded machine
	// took longer than a 10s TTL for them, and the lease expired under
	// the state comparison.
	r := cliEnv(t, as(appTok), "acquire", "jobs/nightly", "--holder", "a", "--ttl", "1h", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire: %v", r)
	}
	var l jsonLease
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatal(err)
	}
	tok := fmt.Sprint(l.Token)
	if r := cliEnv(t, as(appTok), "kv", "put", "jobs/nightly/report", "v1", "--lease", "jobs/nightly", "--token", tok); r.code != 0 {
		t.Fatalf("fenced put: %v", r)
	}
	state := func() string {
		t.Helper()
		r := cliEnv(t, as(opsTok), "list", "-o", "json")
		k := cliEnv(t, as(opsTok), "kv", "list", "-o", "json")
		if r.code != 0 || k.code != 0 {
			t.Fatalf("list: %v %v", r, k)
		}
		// Remaining times change; holders and tokens must not.
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var l jsonLease
			json.Unmarshal([]byte(line), &l)
			fmt.Fprintf(&b, "%s=%s/%d ", l.Name, l.Holder, l.Token)
		}
		return b.String() + k.stdout
	}
	before := state()

	// Refused, exit 5, nothing changed.
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"no credentials", base, []string{"release", "jobs/nightly", "--token", tok}, 5},
		{"a wrong token", as("tnr_nope"), []string{"release", "jobs/nightly", "--token", tok}, 5},
		{"the right token of another principal", as(otherTok), []string{"release", "jobs/nightly", "--token", tok}, 5},
		{"another principal's fenced write", as(otherTok), []string{"kv", "put", "jobs/nightly/report", "evil", "--lease", "jobs/nightly", "--token", tok}, 5},
		{"a name outside the principal's prefix", as(appTok), []string{"acquire", "other/x", "--holder", "a"}, 5},
		{"status needs any role, no more", as(appTok), []string{"status"}, 0},
		{"a client certificate without a role", append(base, "TENURE_CERT="+filepath.Join(certs, "client.crt"), "TENURE_KEY="+filepath.Join(certs, "client.key")),
			[]string{"release", "jobs/nightly", "--token", tok}, 5},
		{"plain HTTP to the TLS port", []string{"TENURE_ENDPOINTS=" + all, "TENURE_AUTH_TOKEN=" + opsTok}, []string{"release", "jobs/nightly", "--token", tok, "--request-timeout", "1s"}, 1},
	} {
		r := cliEnv(t, tc.env, tc.args...)
		if r.code != tc.code {
			t.Errorf("%s: %v, want exit %d", tc.name, r, tc.code)
		}
		if after := state(); after != before {
			t.Fatalf("%s changed the state:\n%s\nwant\n%s", tc.name, after, before)
		}
	}

	if r := cliEnv(t, as(appTok), "release", "jobs/nightly", "--token", tok); r.code != 0 {
		t.Fatalf("release: %v", r)
	}
	// tenure run: the command writes under the lease with the CLI, which
	// finds the TLS settings and the bearer token in its environment.
	if r := cliEnv(t, append(as(appTok), "TENURE_BIN="+bin.tenure), "run", "jobs/run", "--ttl", "5s", "--", "sh", "-c",
		`"$TENURE_BIN" kv put jobs/run/out "ran with token $TENURE_TOKEN" --lease "$TENURE_LEASE" --token "$TENURE_TOKEN"`); r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	if r := cliEnv(t, as(appTok), "kv", "get", "jobs/run/out", "--print-value-only"); r.code != 0 || !strings.HasPrefix(r.stdout, "ran with token ") {
		t.Fatalf("the command's write under tenure run: %v", r)
	}

	// Failover: hold a lease, kill the leader, renew it with the same
	// token through the survivors.
	r = cliEnv(t, as(appTok), "acquire", "jobs/failover", "--holder", "b", "--ttl", "1m", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire: %v", r)
	}
	json.Unmarshal([]byte(r.stdout), &l)
	st := cliEnv(t, as(opsTok), "status", "-o", "json", "--endpoints", n1.api)
	var js jsonStatus
	json.Unmarshal([]byte(st.stdout), &js)
	var survivors []string
	for _, s := range servers {
		if s.name == js.Leader {
			s.kill()
		} else {
			survivors = append(survivors, s.api)
		}
	}
	if len(survivors) != 2 {
		t.Fatalf("leader %q not found among the servers", js.Leader)
	}
	eventually(t, "the lease renewed through the survivors", 30*time.Second, func() error {
		r := cliEnv(t, append(as(appTok), "TENURE_ENDPOINTS="+strings.Join(survivors, ",")), "renew", "jobs/failover", "--token", fmt.Sprint(l.Token), "-o", "json")
		if r.code != 0 {
			return fmt.Errorf("%v", r)
		}
		return nil
	})

	// Revoke other's token by its ID (tenure auth list, tenure auth
	// revoke), then SIGHUP the members.
	r = cliEnv(t, nil, "auth", "list", "-o", "json", "--file", authFile)
	var otherID string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e struct {
			Principal string   `json:"principal"`
			TokenIDs  []string `json:"token_ids"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("auth list -o json: %q: %v", line, err)
		}
		if e.Principal == "other" && len(e.TokenIDs) == 1 {
			otherID = e.TokenIDs[0]
		}
	}
	if r.code != 0 || otherID == "" {
		t.Fatalf("auth list: %v; want one token ID for other", r)
	}
	if r := cliEnv(t, nil, "auth", "revoke", otherID, "--file", authFile); r.code != 0 {
		t.Fatalf("auth revoke %s: %v", otherID, r)
	}
	if r := cliEnv(t, append(as(otherTok), "TENURE_ENDPOINTS="+strings.Join(survivors, ",")), "list"); r.code != 0 {
		t.Fatalf("other lists before the reload: %v", r)
	}
	for _, s := range servers {
		if s.proc.Running() {
			s.proc.Signal(syscall.SIGHUP)
		}
	}
	eventually(t, "other's token to be refused after SIGHUP", 10*time.Second, func() error {
		r := cliEnv(t, append(as(otherTok), "TENURE_ENDPOINTS="+strings.Join(survivors, ",")), "list")
		if r.code != 5 {
			return fmt.Errorf("%v", r)
		}
		return nil
	})
	for _, s := range servers {
		if s.proc.Running() && !strings.Contains(s.log.String(), "auth file reloaded") {
			t.Errorf("%s did not log the reload", s.name)
		}
	}
	if !strings.Contains(n1.log.String()+n2.log.String()+n3.log.String(), "refused a request") {
		t.Error("no member logged a refusal")
	}
}

// authToken makes a token of principal name with roles in the auth file
// with tenure auth token, and returns it.
func authToken(t *testing.T, file, name string, roles ...string) string {
	t.Helper()
	args := []string{"auth", "token", name, "--file", file}
	for _, r := range roles {
		args = append(args, "--role", r)
	}
	r := cliEnv(t, nil, args...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "tnr_") {
		t.Fatalf("auth token %s: %v", name, r)
	}
	return strings.TrimSpace(r.stdout)
}
