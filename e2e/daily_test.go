package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// bgCLI is a tenure CLI process running in the background, its stdout
// read line by line.
type bgCLI struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	errb  *syncBuffer
	done  chan struct{}
	code  int
}

func startCLI(t *testing.T, endpoints string, args ...string) *bgCLI {
	t.Helper()
	cmd := exec.Command(bin.tenure, args...)
	cmd.Env = append(os.Environ(), "TENURE_ENDPOINTS="+endpoints)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &bgCLI{t: t, cmd: cmd, lines: make(chan string, 100), errb: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// line returns the next line of output, failing the test if none comes
// within 20s.
func (p *bgCLI) line(what string) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("waiting for %s: tenure %q exited; stderr %q", what, p.cmd.Args[1:], p.errb.String())
		}
		return l
	case <-time.After(20 * time.Second):
		p.t.Fatalf("waited 20s for %s from tenure %q; stderr %q", what, p.cmd.Args[1:], p.errb.String())
	}
	return ""
}

// stop sends sig and returns the exit code.
func (p *bgCLI) stop(sig os.Signal) int {
	p.t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Fatalf("tenure %q did not exit within 20s of %s", p.cmd.Args[1:], sig)
	}
	return p.code
}

func decode[T any](t *testing.T, line string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%q is not the JSON expected: %v", line, err)
	}
	return v
}

type jsonSlot struct {
	jsonLease
	Limit int `json:"limit"`
}

func TestSemaphoreFromTheCLI(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	// Three holders of a semaphore of 2: two slots with their own tokens.
	a := decode[jsonSlot](t, cli(t, ep, "acquire", "jobs/sem", "--limit", "2", "--holder", "a", "--ttl", "10s", "-o", "json").stdout)
	b := decode[jsonSlot](t, cli(t, ep, "acquire", "jobs/sem", "--limit", "2", "--holder", "b", "--ttl", "10s", "-o", "json").stdout)
	if a.Limit != 2 || b.Limit != 2 || b.Token <= a.Token {
		t.Fatalf("slots %+v and %+v, want limit 2 and growing tokens", a, b)
	}
	r := cli(t, ep, "acquire", "jobs/sem", "--limit", "2", "--holder", "c")
	mustCode(t, 3, r, "third holder")
	if want := fmt.Sprintf("tenure: jobs/sem: all 2 slots are held; the first to expire is held by a (token %d,", a.Token); !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("third holder: %v, want %q", r, want)
	}
	r = cli(t, ep, "acquire", "jobs/sem", "--holder", "c", "-o", "json")
	mustCode(t, 2, r, "plain acquire of the semaphore")
	if !strings.Contains(r.stderr, `held with limit 2, not 1`) || !strings.Contains(r.stderr, `"code":"invalid_argument"`) {
		t.Fatalf("plain acquire of the semaphore: %v", r)
	}
	// get lists both slots.
	r = cli(t, ep, "get", "jobs/sem")
	mustCode(t, 0, r, "get")
	if want := fmt.Sprintf("jobs/sem held by a (a slot of 2), token %d,", a.Token); !strings.HasPrefix(r.stdout, want) || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("get: %v, want two lines starting with %q", r, want)
	}
	// Each slot's token writes while its slot is held; a released slot's
	// token fences nothing.
	mustCode(t, 0, cli(t, ep, "kv", "put", "sem/a", "1", "--lease", "jobs/sem", "--token", fmt.Sprint(a.Token)), "put with a's slot")
	mustCode(t, 0, cli(t, ep, "release", "jobs/sem", "--token", fmt.Sprint(a.Token)), "release a's slot")
	mustCode(t, 4, cli(t, ep, "kv", "put", "sem/a", "2", "--lease", "jobs/sem", "--token", fmt.Sprint(a.Token)), "put with a's released slot")
	mustCode(t, 0, cli(t, ep, "kv", "put", "sem/b", "1", "--lease", "jobs/sem", "--token", fmt.Sprint(b.Token)), "put with b's slot")
	c := decode[jsonSlot](t, cli(t, ep, "acquire", "jobs/sem", "--limit", "2", "--holder", "c", "-o", "json").stdout)
	if c.Token <= b.Token {
		t.Fatalf("c's slot token %d, want above %d", c.Token, b.Token)
	}
}

// TestRunLimit: at most 3 jobs of a kind at once, with tenure run
// --limit 3, each with its own token.
func TestRunLimit(t *testing.T) {
	s := startSingle(t)
	dir := t.TempDir()
	// Each job records its token, waits until it may go, and records it
	// ran; the first three must start before any finishes.
	job := `echo "$TENURE_TOKEN" > "` + dir + `/started.$TENURE_HOLDER"; while [ ! -e "` + dir + `/go" ]; do sleep 0.05; done`
	var procs []*bgCLI
	for i := range 4 {
		procs = append(procs, startCLI(t, s.api, "run", "jobs/nightly", "--limit", "3", "--holder", fmt.Sprintf("w%d", i), "--ttl", "5s", "--", "sh", "-c", job))
	}
	started := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "started.*"))
		return m
	}
	eventually(t, "three jobs to start", 20*time.Second, func() error {
		if n := len(started()); n != 3 {
			return fmt.Errorf("%d started", n)
		}
		return nil
	})
	// The fourth waits: all three slots are held.
	r := cli(t, s.api, "get", "jobs/nightly", "-o", "json")
	if n := strings.Count(r.stdout, `"limit":3`); n != 3 {
		t.Fatalf("get: %v, want 3 slots", r)
	}
	tokens := map[string]bool{}
	for _, f := range started() {
		b, _ := os.ReadFile(f)
		tokens[strings.TrimSpace(string(b))] = true
	}
	if len(tokens) != 3 {
		t.Fatalf("the three jobs ran with the tokens %v, want three different ones", tokens)
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("tenure run %q did not finish; stderr %q", p.cmd.Args, p.errb.String())
		}
		if p.code != 0 {
			t.Fatalf("tenure run %q exited %d; stderr %q", p.cmd.Args, p.code, p.errb.String())
		}
	}
	if n := len(started()); n != 4 {
		t.Fatalf("%d jobs ran, want 4", n)
	}
}

func TestElectFromTheShell(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	listen := startCLI(t, ep, "elect", "--listen", "svc/leader", "-o", "json")
	p1 := startCLI(t, ep, "elect", "svc/leader", "p1", "--ttl", "2s")
	lead := p1.line("p1 to lead")
	var tok1 uint64
	if _, err := fmt.Sscanf(lead, "leading svc/leader as p1, token %d", &tok1); err != nil {
		t.Fatalf("p1 printed %q: %v", lead, err)
	}
	l1 := decode[map[string]any](t, listen.line("the first leader"))
	if l1["holder"] != "p1" || l1["token"] != float64(tok1) {
		t.Fatalf("listen printed %v, want p1 with token %d", l1, tok1)
	}
	// p2 waits; p1 resigns on SIGINT (exit 0) and p2 leads with a larger token.
	p2 := startCLI(t, ep, "elect", "svc/leader", "p2", "--ttl", "2s", "-o", "json")
	if code := p1.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("p1 exited %d on SIGINT; stderr %q", code, p1.errb.String())
	}
	l2 := decode[jsonLease](t, p2.line("p2 to lead"))
	if l2.Holder != "p2" || l2.Token <= tok1 {
		t.Fatalf("p2 leads with %+v, want a token above %d", l2, tok1)
	}
	if got := decode[map[string]any](t, listen.line("the second leader")); got["holder"] != "p2" || got["token"] != float64(l2.Token) {
		t.Fatalf("listen printed %v, want p2 with token %d", got, l2.Token)
	}
	if code := p2.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("p2 exited %d on SIGTERM", code)
	}
	mustCode(t, 6, cli(t, ep, "get", "svc/leader"), "get after both resigned")
	if code := listen.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("listen exited %d", code)
	}
}

func TestKVListAndValues(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	a := acquireJSON(t, ep, "jobs/kv", "--holder", "a")
	tok := fmt.Sprint(a.Token)
	mustCode(t, 0, cli(t, ep, "kv", "put", "reports/b", "two", "--lease", "jobs/kv", "--token", tok), "put b")
	mustCode(t, 0, cli(t, ep, "kv", "put", "reports/a", "one", "--lease", "jobs/kv", "--token", tok), "put a")
	mustCode(t, 0, cliStdin(t, ep, bytes.NewReader([]byte{0, 0xff, '\n'}), "kv", "put", "reports/bin", "-", "--lease", "jobs/kv", "--token", tok), "put bin")
	mustCode(t, 0, cli(t, ep, "kv", "put", "other", "x", "--lease", "jobs/kv", "--token", tok), "put other")

	r := cli(t, ep, "kv", "list", "reports/")
	want := fmt.Sprintf("reports/a = one (lease jobs/kv, token %[1]d, revision 2)\n"+
		"reports/b = two (lease jobs/kv, token %[1]d, revision 1)\n"+
		"reports/bin = base64:AP8K (binary, 3 bytes; lease jobs/kv, token %[1]d, revision 3)\n", a.Token)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("kv list reports/: %v\nwant %q", r, want)
	}
	r = cli(t, ep, "kv", "list", "--keys-only")
	if r.code != 0 || r.stdout != "other\nreports/a\nreports/b\nreports/bin\n" {
		t.Fatalf("kv list --keys-only: %v", r)
	}
	r = cli(t, ep, "kv", "list", "reports/b", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"key":"reports/bin","value":"AP8K","encoding":"base64"`) ||
		!strings.Contains(r.stdout, `"key":"reports/b","value":"two","encoding":"utf-8"`) {
		t.Fatalf("kv list -o json: %v", r)
	}
	r = cli(t, ep, "kv", "get", "reports/bin", "--print-value-only")
	if r.code != 0 || r.stdout != "\x00\xff\n" {
		t.Fatalf("kv get --print-value-only of a binary value: %v", r)
	}
	r = cli(t, ep, "kv", "get", "reports/a", "--print-value-only")
	if r.code != 0 || r.stdout != "one" {
		t.Fatalf("kv get --print-value-only: %v", r)
	}
	mustCode(t, 0, cli(t, ep, "kv", "list", "nothing/"), "kv list of nothing")
}

// TestExactErrors: each error of issue 12, as a user saw it.
func TestExactErrors(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	a := acquireJSON(t, ep, "jobs/err", "--holder", "a", "--ttl", "10s")
	tok := fmt.Sprint(a.Token)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string // prefix
	}{
		{"name not UTF-8", []string{"acquire", "jobs/\xff"}, 2, `tenure: NAME "jobs/\xff" is not valid UTF-8`},
		{"key not UTF-8", []string{"kv", "get", "k\xfe"}, 2, `tenure: KEY "k\xfe" is not valid UTF-8`},
		{"kv delete of a missing key", []string{"kv", "delete", "no/such/key", "--lease", "jobs/err", "--token", tok}, 6, `tenure: key "no/such/key" not found`},
		{"port out of range", []string{"get", "jobs/err", "--endpoints", "127.0.0.1:99999"}, 2,
			`tenure: --endpoints: endpoint "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
		{"ttl out of range", []string{"acquire", "jobs/x", "--ttl", "9999999h"}, 2,
			`tenure: invalid value "9999999h" for flag --ttl: must be a duration such as 10s or 1m30s, from the server's minimum TTL (2s by default; see 'tenure status') up to 24h`},
		{"wait timed out", []string{"acquire", "jobs/err", "--holder", "b", "--wait", "--timeout", "1s"}, 3,
			fmt.Sprintf("tenure: waited 1s for jobs/err: held by a (token %d, ", a.Token)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r := cli(t, ep, tt.args...)
			if r.code != tt.code || !strings.HasPrefix(r.stderr, tt.stderr) {
				t.Fatalf("%v\nwant exit %d and stderr starting %q", r, tt.code, tt.stderr)
			}
			if tt.code == 2 && time.Since(start) > 2*time.Second {
				t.Errorf("a usage error took %s", time.Since(start))
			}
		})
	}
	// Nothing was sent for the bad name: no lease, nothing waiting.
	r := cli(t, ep, "list", "-o", "json")
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("list after the errors: %v, want jobs/err alone", r)
	}
	// Releasing twice: the second says so, exit 7.
	mustCode(t, 0, cli(t, ep, "release", "jobs/err", "--token", tok), "release")
	r = cli(t, ep, "release", "jobs/err", "--token", tok)
	if want := fmt.Sprintf("tenure: jobs/err: no live grant has token %d (already released, expired, or replaced by a newer grant); nothing to release\n", a.Token); r.code != 7 || r.stderr != want {
		t.Fatalf("second release: %v, want exit 7 and %q", r, want)
	}
	// With -o json the held error is JSON on stderr.
	acquireJSON(t, ep, "jobs/err", "--holder", "a")
	r = cli(t, ep, "acquire", "jobs/err", "--holder", "b", "-o", "json")
	e := decode[map[string]any](t, r.stderr)
	if r.code != 3 || e["code"] != "failed_precondition" || e["reason"] != "LEASE_HELD" || e["holder"] != "a" || e["exit_code"] != 3.0 {
		t.Fatalf("held with -o json: %v", r)
	}
}

func TestVersionHelpCompletion(t *testing.T) {
	r := cli(t, "127.0.0.1:1", "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "tenure ") {
		t.Fatalf("--version: %v", r)
	}
	r = cli(t, "127.0.0.1:1", "kv", "list", "-h")
	if r.code != 0 || !strings.Contains(r.stdout, "  --keys-only\n") || strings.Count(r.stdout, "--output") != 1 {
		t.Fatalf("kv list -h: %v", r)
	}
	r = cli(t, "127.0.0.1:1", "completion", "bash")
	if r.code != 0 || !strings.Contains(r.stdout, "complete -o default -F _tenure tenure") {
		t.Fatalf("completion bash: %v", r)
	}
}
