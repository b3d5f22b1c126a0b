package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// parseUnixNano parses `date +%s.%N` output.
func parseUnixNano(s string) (time.Time, error) {
	sec, frac, ok := strings.Cut(strings.TrimSpace(s), ".")
	if !ok || len(frac) != 9 {
		return time.Time{}, fmt.Errorf("not seconds.nanoseconds: %q", s)
	}
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	nanos, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(secs, nanos), nil
}

var sentRE = regexp.MustCompile(`^tenure: (?:acquired|renewed) jobs/x: .*sent (\S+), deadline`)

// lastRenewalSent returns the send time of the last successful grant or
// renewal that tenure run --verbose logged.
func lastRenewalSent(t *testing.T, stderr string) time.Time {
	t.Helper()
	var last time.Time
	for _, l := range strings.Split(stderr, "\n") {
		if m := sentRE.FindStringSubmatch(l); m != nil {
			ts, err := time.Parse(time.RFC3339Nano, strings.TrimSuffix(m[1], ","))
			if err != nil {
				t.Fatalf("bad send time in %q: %v", l, err)
			}
			last = ts
		}
	}
	if last.IsZero() {
		t.Fatalf("tenure run logged no renewal:\n%s", stderr)
	}
	return last
}

// The "done when" of tenure run: the command gets the token, another
// holder is refused, and when the server freezes, the command gets
// SIGTERM less than a TTL after the last successful renewal was sent and
// tenure run says the lease was lost.
func TestRunStepsDownWhenTheServerFreezes(t *testing.T) {
	s := startSingle(t)
	dir := t.TempDir()
	termFile := filepath.Join(dir, "term")
	child := fmt.Sprintf(`echo token=$TENURE_TOKEN lease=$TENURE_LEASE holder=$TENURE_HOLDER endpoints=$TENURE_ENDPOINTS
trap 'date +%%s.%%N > %s; exit 143' TERM
sleep 60 & wait`, termFile)
	run := startProc(t, "tenure run", s.api, bin.tenure, "run", "jobs/x", "--ttl", "3s", "--verbose", "--", "sh", "-c", child)

	m, _ := waitLine(t, "the command to print its token", run.stdout,
		regexp.MustCompile(`^token=(\d+) lease=jobs/x holder=(\S+) endpoints=(\S+)$`), 20*time.Second)
	if m[3] != s.api {
		t.Errorf("TENURE_ENDPOINTS=%s, want %s", m[3], s.api)
	}
	token, _ := strconv.ParseUint(m[1], 10, 64)
	r := cli(t, s.api, "acquire", "jobs/x", "--holder", "other")
	mustCode(t, 3, r, "acquire by another holder while tenure run holds the lease")
	got := acquireJSONQuiet(t, s.api, "get", "jobs/x")
	if got.Token != token || got.Holder != m[2] {
		t.Fatalf("the cluster has %+v, want token %d held by %s", got, token, m[2])
	}
	// Let a renewal or two go through.
	waitLine(t, "a renewal", run.stderr, regexp.MustCompile(`^tenure: renewed jobs/x`), 5*time.Second)

	s.proc.Signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	code := run.wait(15 * time.Second)
	exitedAt := time.Now()
	s.proc.Signal(syscall.SIGCONT)
	stderr := run.stderr.String()
	if code != 4 || !strings.Contains(stderr, "tenure: lease jobs/x lost: ") {
		t.Fatalf("tenure run exited %d, want 4 and a lost message; stderr:\n%s", code, stderr)
	}
	data, err := os.ReadFile(termFile)
	if err != nil {
		t.Fatalf("the command got no SIGTERM: %v", err)
	}
	termAt, err := parseUnixNano(string(data))
	if err != nil {
		t.Fatalf("term time: %v", err)
	}
	sent := lastRenewalSent(t, stderr)
	delay := termAt.Sub(sent)
	t.Logf("SIGTERM %s after the last successful renewal was sent, %s after SIGSTOP; tenure run exited %s after SIGSTOP",
		delay.Round(time.Millisecond), termAt.Sub(stoppedAt).Round(time.Millisecond), exitedAt.Sub(stoppedAt).Round(time.Millisecond))
	if delay <= 0 || delay >= 3*time.Second {
		t.Errorf("SIGTERM came %s after the last renewal was sent, want less than the 3s TTL", delay)
	}
	if termAt.Before(stoppedAt.Add(-time.Second)) {
		t.Errorf("SIGTERM at %s, well before the server was frozen at %s", termAt, stoppedAt)
	}

	// Once the lease expired on the server, the next holder gets a
	// larger token.
	next := acquireJSON(t, s.api, "jobs/x", "--holder", "other", "--ttl", "3s", "--wait", "--timeout", "10s")
	if next.Token <= token {
		t.Errorf("next grant has token %d, want more than %d", next.Token, token)
	}
}

// acquireJSONQuiet runs a CLI command with -o json that prints a lease.
func acquireJSONQuiet(t *testing.T, endpoints string, args ...string) jsonLease {
	t.Helper()
	r := cli(t, endpoints, append(args, "-o", "json")...)
	mustCode(t, 0, r, strings.Join(args, " "))
	var l jsonLease
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &l); err != nil {
		t.Fatalf("%s output %q: %v", strings.Join(args, " "), r.stdout, err)
	}
	return l
}

func TestRunPassesOnSignalsAndExitCodes(t *testing.T) {
	s := startSingle(t)

	mustCode(t, 7, cli(t, s.api, "run", "jobs/y", "--", "sh", "-c", "exit 7"), "run of a command that exits 7")
	mustCode(t, 2, cli(t, s.api, "run", "jobs/y", "--ttl", "3s", "--kill-after", "5s", "--", "true"), "run with --kill-after longer than the TTL allows")
	mustCode(t, 2, cli(t, s.api, "run", "jobs/y", "true"), "run without --")

	run := startProc(t, "tenure run", s.api, bin.tenure, "run", "jobs/y", "--", "sh", "-c",
		`trap 'echo got INT; exit 3' INT; echo started; sleep 60 & wait`)
	waitLine(t, "the command to start", run.stdout, regexp.MustCompile(`^started$`), 20*time.Second)
	run.signal(syscall.SIGINT)
	if code := run.wait(10 * time.Second); code != 3 || !strings.Contains(run.stdout.String(), "got INT") {
		t.Fatalf("tenure run exited %d after SIGINT, stdout %q; want the command to get SIGINT and exit 3", code, run.stdout)
	}
	// Released at once: another holder gets it without waiting.
	acquireJSON(t, s.api, "jobs/y", "--holder", "other")
}

// Two programs using election.Run on one name: one leads; when it is
// killed, the other leads within TTL+1s with a larger token.
func TestElectionRunFailoverBetweenProcesses(t *testing.T) {
	s := startSingle(t)
	leaderBin := buildTestProgram(t, "leader")
	const ttl = 2 * time.Second
	args := func(holder string) []string {
		return []string{"--endpoints", s.api, "--name", "svc/leader", "--holder", holder, "--ttl", ttl.String()}
	}
	procs := map[string]*proc{
		"a": startProc(t, "leader a", s.api, leaderBin, args("a")...),
		"b": startProc(t, "leader b", s.api, leaderBin, args("b")...),
	}
	leadingRE := regexp.MustCompile(`^leading token=(\d+)$`)
	var first string
	var firstToken uint64
	eventually(t, "one of the two to lead", 20*time.Second, func() error {
		for name, p := range procs {
			for _, l := range p.stdout.lines() {
				if m := leadingRE.FindStringSubmatch(l); m != nil {
					first = name
					firstToken, _ = strconv.ParseUint(m[1], 10, 64)
					return nil
				}
			}
		}
		return fmt.Errorf("nobody leads yet")
	})
	other := "b"
	if first == "b" {
		other = "a"
	}
	// Both see the same leader; the other does not lead meanwhile.
	waitLine(t, other+" to observe the leader", procs[other].stdout,
		regexp.MustCompile(fmt.Sprintf(`^new leader %s token=%d$`, first, firstToken)), 10*time.Second)
	if strings.Contains(procs[other].stdout.String(), "leading") {
		t.Fatalf("both lead:\n%s\n%s", procs[first].stdout, procs[other].stdout)
	}

	procs[first].signal(syscall.SIGKILL)
	killedAt := time.Now()
	m, seenAt := waitLine(t, other+" to lead", procs[other].stdout, leadingRE, 10*time.Second)
	token, _ := strconv.ParseUint(m[1], 10, 64)
	took := seenAt.Sub(killedAt)
	t.Logf("%s (token %d) killed; %s leads with token %d after at most %s", first, firstToken, other, token, took.Round(time.Millisecond))
	if took > ttl+time.Second {
		t.Errorf("%s took %s to lead, want at most TTL+1s = %s", other, took, ttl+time.Second)
	}
	if token <= firstToken {
		t.Errorf("new leader's token %d is not larger than %d", token, firstToken)
	}
	// The new leader's fenced heartbeats go through.
	eventually(t, "the new leader's heartbeat", 5*time.Second, func() error {
		r := cli(t, s.api, "kv", "get", "svc/leader/heartbeat", "-o", "json")
		if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf(`"token":%d`, token)) {
			return fmt.Errorf("%v", r)
		}
		return nil
	})
	procs[other].signal(syscall.SIGTERM)
	if code := procs[other].wait(10 * time.Second); code != 0 {
		t.Errorf("leader %s exited %d after SIGTERM, want 0", other, code)
	}
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^stopped token=%d: `, token)).MatchString(procs[other].stdout.String()) {
		t.Errorf("%s did not report stepping down: %s", other, procs[other].stdout)
	}
	// It released on the way out.
	mustCode(t, 6, cli(t, s.api, "get", "svc/leader"), "get after the leader stopped")
}
