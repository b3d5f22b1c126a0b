package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/lease"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, exitOK},
		{"usage", &usageError{msg: "missing NAME"}, exitUsage},
		{"invalid from server", fmt.Errorf("%w: ttl too short", client.ErrInvalid), exitUsage},
		{"held", &client.HeldError{Name: "x", Holder: "b", Token: 3}, exitHeld},
		{"held sentinel", client.ErrLeaseHeld, exitHeld},
		{"stale", &lease.StaleError{Name: "x", Token: 2}, exitFenced},
		{"stale wrapped", fmt.Errorf("renew: %w", client.ErrStaleToken), exitFenced},
		{"not found", &notFoundError{what: `lease "x"`, err: client.ErrNotFound}, exitNotFound},
		{"released", &releasedError{name: "x", token: 2, err: client.ErrStaleToken}, exitReleased},
		{"wait timed out", &waitedError{waited: 2 * time.Second, held: &client.HeldError{Name: "x"}}, exitHeld},
		{"unavailable", client.ErrUnavailable, exitFailure},
		{"indeterminate", client.ErrIndeterminate, exitFailure},
		{"deadline", context.DeadlineExceeded, exitFailure},
		{"other", errors.New("boom"), exitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("holder", "", "")
	fs.Bool("wait", false, "")
	fs.Duration("ttl", 0, "")
	tests := []struct {
		args, want []string
	}{
		{[]string{"jobs/x", "--holder", "a"}, []string{"--holder", "a", "--", "jobs/x"}},
		{[]string{"--wait", "jobs/x", "-ttl=5s"}, []string{"--wait", "-ttl=5s", "--", "jobs/x"}},
		{[]string{"k", "--", "--holder", "-"}, []string{"--", "k", "--holder", "-"}},
		{[]string{"-", "--bogus", "x"}, []string{"--bogus", "--", "-", "x"}},
		{[]string{"x", "--holder"}, []string{"--holder", "--", "x"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if got := interspersed(fs, tt.args); !slices.Equal(got, tt.want) {
				t.Errorf("interspersed(%q) = %q, want %q", tt.args, got, tt.want)
			}
		})
	}
}

func TestJSONOutput(t *testing.T) {
	c := startCluster(t)
	want := `{"name":"jobs/x","holder":"a","token":3,"ttl":"5s","remaining":"4.98s"}` + "\n"
	runs := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flags after the name", nil, []string{"acquire", "jobs/x", "--holder", "a", "--ttl", "5s", "-o", "json", "--endpoints", c.addr}},
		{"global flags first", nil, []string{"--endpoints", c.addr, "--output", "json", "acquire", "--ttl=5s", "jobs/x", "-holder=a"}},
		{"endpoints from env", map[string]string{"TENURE_ENDPOINTS": c.addr}, []string{"-o", "json", "acquire", "jobs/x", "--holder", "a", "--ttl", "5s"}},
		{"renew", nil, []string{"renew", "jobs/x", "--token", "3", "-o", "json", "--endpoints", c.addr}},
		{"get", nil, []string{"get", "jobs/x", "-o", "json", "--endpoints", c.addr}},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			res := runCLI(t.Context(), r.env, r.args...)
			if res.code != exitOK || res.stdout != want || res.stderr != "" {
				t.Fatalf("got code %d, stdout %q, stderr %q; want 0 and %q", res.code, res.stdout, res.stderr, want)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(res.stdout), &m); err != nil {
				t.Fatalf("stdout is not JSON: %v", err)
			}
			if _, ok := m["token"].(float64); !ok {
				t.Errorf("token is %T, want a JSON number", m["token"])
			}
		})
	}

	res := runCLI(t.Context(), nil, "list", "jobs/", "-o", "json", "--endpoints", c.addr)
	wantList := `{"name":"jobs/a","holder":"h1","token":1,"ttl":"5s","remaining":"4.98s"}` + "\n" +
		`{"name":"jobs/b","holder":"h2","token":2,"ttl":"10s","remaining":"9.98s"}` + "\n"
	if res.code != exitOK || res.stdout != wantList {
		t.Errorf("list: code %d, stdout %q; want %q", res.code, res.stdout, wantList)
	}
}

func TestTextOutput(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "jobs/x"}, "jobs/x held by a, token 3, ttl 5s, 4.98s remaining\n"},
		{[]string{"release", "jobs/x", "--token", "3"}, "released jobs/x (token 3)\n"},
		{[]string{"list"}, "a held by h1, token 1, ttl 5s, 4.98s remaining\nb held by h2, token 2, ttl 10s, 9.98s remaining\n"},
		{[]string{"kv", "put", "k", "v1", "--lease", "jobs/x", "--token", "3"}, "put k (revision 7)\n"},
		{[]string{"kv", "get", "k"}, "k = v1 (lease jobs/x, token 3, revision 7)\n"},
		{[]string{"kv", "get", "k", "--print-value-only"}, "v1"},
		{[]string{"kv", "delete", "k", "--lease", "jobs/x", "--token", "3"}, "deleted k (revision 8)\n"},
		{[]string{"-o", "json", "kv", "get", "k"}, `{"key":"k","value":"v1","encoding":"utf-8","lease":"jobs/x","token":3,"revision":7}` + "\n"},
		{[]string{"-o", "json", "release", "jobs/x", "--token", "3"}, `{"name":"jobs/x","token":3,"released":true}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, tt.args...)
			if res.code != exitOK || res.stdout != tt.want || res.stderr != "" {
				t.Errorf("got code %d, stdout %q, stderr %q; want 0 and %q", res.code, res.stdout, res.stderr, tt.want)
			}
		})
	}
}

func TestDefaultHolder(t *testing.T) {
	c := startCluster(t)
	res := runCLI(t.Context(), nil, "acquire", "jobs/x", "--endpoints", c.addr)
	if res.code != exitOK {
		t.Fatalf("acquire: code %d, stderr %q", res.code, res.stderr)
	}
	host, _ := os.Hostname()
	req := c.lastAcquire()
	if want := fmt.Sprintf("%s-%d", host, os.Getpid()); req.GetHolder() != want {
		t.Errorf("holder = %q, want %q", req.GetHolder(), want)
	}
	if req.GetTtl().AsDuration() != 10*time.Second || req.GetWait() {
		t.Errorf("request = %v, want ttl 10s without wait", req)
	}
}

func TestExitCodes(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
		check  func(t *testing.T)
	}{
		{"held", []string{"acquire", "jobs/held", "--holder", "a"}, exitHeld,
			"tenure: jobs/held is held by b (token 3, 4.2s remaining)\n", nil},
		{"wait timed out", []string{"acquire", "jobs/held", "--holder", "a", "--wait", "--timeout", "2s"}, exitHeld,
			"tenure: waited 2s for jobs/held: held by b (token 3, 4.2s remaining)\n", func(t *testing.T) {
				if req := c.lastAcquire(); !req.GetWait() || req.GetWaitTimeout().AsDuration() > 2*time.Second ||
					req.GetWaitTimeout().AsDuration() < time.Second {
					t.Errorf("acquire request = %v, want a wait of about 2s", req)
				}
			}},
		{"renew stale", []string{"renew", "jobs/x", "--token", "2"}, exitFenced,
			"tenure: lease: stale token 2 for \"jobs/x\": the current grant has another token\n", nil},
		{"release stale", []string{"release", "jobs/x", "--token", "2"}, exitReleased,
			"tenure: jobs/x: no live grant has token 2 (already released, expired, or replaced by a newer grant); nothing to release\n", nil},
		{"put stale", []string{"kv", "put", "k", "v", "--lease", "jobs/x", "--token", "2"}, exitFenced,
			"tenure: lease: stale token 2 for \"jobs/x\": the current grant has another token\n", nil},
		{"delete stale", []string{"kv", "delete", "k", "--lease", "jobs/x", "--token", "2"}, exitFenced,
			"tenure: lease: stale token 2 for \"jobs/x\": the current grant has another token\n", nil},
		{"get missing", []string{"get", "jobs/none"}, exitNotFound, "tenure: lease \"jobs/none\" not found\n", nil},
		{"kv get missing", []string{"kv", "get", "nokey"}, exitNotFound, "tenure: key \"nokey\" not found\n", nil},
		{"invalid from server", []string{"acquire", "jobs/x", "--ttl", "1s"}, exitUsage,
			"tenure: lease: invalid argument: ttl 1s is below the minimum of 2s\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, tt.args...)
			if res.code != tt.code || res.stderr != tt.stderr || res.stdout != "" {
				t.Errorf("got code %d, stdout %q, stderr %q; want %d and stderr %q", res.code, res.stdout, res.stderr, tt.code, tt.stderr)
			}
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
}

func TestWaitDefaultTimeout(t *testing.T) {
	c := startCluster(t)
	res := runCLI(t.Context(), nil, "acquire", "jobs/x", "--wait", "--endpoints", c.addr)
	if res.code != exitOK {
		t.Fatalf("code %d, stderr %q", res.code, res.stderr)
	}
	if wt := c.lastAcquire().GetWaitTimeout().AsDuration(); wt <= 29*time.Second || wt > 30*time.Second {
		t.Errorf("wait timeout = %s, want about 30s", wt)
	}
}

func TestUnreachable(t *testing.T) {
	res := runCLI(t.Context(), nil, "get", "jobs/x", "--endpoints", fakeserver.DeadAddr(t), "--request-timeout", "100ms")
	if res.code != exitFailure || !strings.HasPrefix(res.stderr, "tenure: client: no endpoint could serve the request") {
		t.Errorf("got code %d, stderr %q; want 1 and an unavailable error", res.code, res.stderr)
	}
}

func TestFailoverAcrossEndpoints(t *testing.T) {
	c := startCluster(t)
	res := runCLI(t.Context(), nil, "get", "jobs/x", "--endpoints", fakeserver.DeadAddr(t)+", http://"+c.addr)
	if res.code != exitOK || res.stdout != "jobs/x held by a, token 3, ttl 5s, 4.98s remaining\n" {
		t.Errorf("got code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

// TestBadUsage: each of these must fail with exit 2 and the usage before
// any request is sent.
func TestBadUsage(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		args []string
		msg  string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--bogus", "get", "x"}, "flag provided but not defined: --bogus"},
		{[]string{"acquire", "jobs/x", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"acquire"}, "missing NAME"},
		{[]string{"acquire", "--holder", "a"}, "missing NAME"},
		{[]string{"acquire", "jobs/x", "--ttl", "abc"}, `invalid value "abc" for flag --ttl`},
		{[]string{"acquire", "jobs/x", "--ttl", "-1s"}, "for flag --ttl: must be a duration"},
		{[]string{"acquire", "jobs/x", "--ttl", "9999999h"}, `invalid value "9999999h" for flag --ttl: must be a duration such as 10s or 1m30s, from the server's minimum TTL (2s by default; see 'tenure status') up to 24h`},
		{[]string{"acquire", "jobs/x", "--ttl", "25h"}, "up to 24h"},
		{[]string{"renew", "jobs/x", "--token", "1", "--ttl", "25h"}, "for flag --ttl: must be a duration"},
		{[]string{"get", "x", "--endpoints", "127.0.0.1:99999"}, `--endpoints: endpoint "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
		{[]string{"acquire", "jobs/x", "--timeout", "5s"}, "--timeout needs --wait"},
		{[]string{"acquire", "jobs/x", "jobs/y"}, `unexpected argument "jobs/y"`},
		{[]string{"renew", "jobs/x", "--token", "x"}, `invalid value "x" for flag --token: must be a positive integer`},
		{[]string{"renew", "jobs/x", "--token", "0"}, "must be a positive integer"},
		{[]string{"renew", "jobs/x", "--token", "-3"}, "must be a positive integer"},
		{[]string{"renew", "jobs/x", "--token", "99999999999999999999"}, `invalid value "99999999999999999999" for flag --token: is too large: tokens go up to 18446744073709551615`},
		{[]string{"acquire", "jobs/x", "--holder", ""}, `--holder "" is empty: give a name, or leave --holder out for the default`},
		{[]string{"acquire", "jobs/x", "--holder", "  "}, `--holder "  " is empty`},
		{[]string{"renew", "jobs/x"}, "--token is required"},
		{[]string{"release", "--token", "3"}, "missing NAME"},
		{[]string{"get"}, "missing NAME"},
		{[]string{"get", "a", "b"}, `unexpected argument "b"`},
		{[]string{"list", "a", "b"}, `unexpected argument "b"`},
		{[]string{"status", "x"}, `unexpected argument "x"`},
		{[]string{"watch", "a", "b"}, `unexpected argument "b"`},
		{[]string{"kv"}, "kv: no command given"},
		{[]string{"kv", "frob"}, `kv: unknown command "frob"`},
		{[]string{"kv", "put", "k", "--lease", "l", "--token", "1"}, "missing VALUE"},
		{[]string{"kv", "put", "k", "v", "--token", "1"}, "--lease is required"},
		{[]string{"kv", "delete", "k", "--lease", "l"}, "--token is required"},
		{[]string{"kv", "get"}, "missing KEY"},
		{[]string{"-o", "yaml", "get", "x"}, `--output must be text or json, got "yaml"`},
		{[]string{"get", "x", "--request-timeout", "0s"}, "--request-timeout must be positive"},
		{[]string{"get", "x", "--endpoints", " , "}, "--endpoints is empty"},
		{[]string{"get", "x", "--cacert", "/nonexistent/ca.crt"}, "--cacert: open /nonexistent/ca.crt"},
		{[]string{"get", "x", "--cert", "c.crt"}, "--key is not"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, tt.args...)
			if res.code != exitUsage {
				t.Errorf("code = %d, want %d", res.code, exitUsage)
			}
			if !strings.HasPrefix(res.stderr, "tenure: ") || !strings.Contains(res.stderr, tt.msg) {
				t.Errorf("stderr = %q, want a tenure: error containing %q", res.stderr, tt.msg)
			}
			if res.stdout != "" {
				t.Errorf("stdout = %q, want nothing", res.stdout)
			}
		})
	}
	if n := c.TotalCalls(); n != 0 {
		t.Errorf("the server got %d calls, want none", n)
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "Usage: tenure [global flags] COMMAND"},
		{[]string{"--help"}, "Usage: tenure [global flags] COMMAND"},
		{[]string{"help"}, "Usage: tenure [global flags] COMMAND"},
		{[]string{"acquire", "-h"}, "Usage: tenure acquire NAME [--holder H] [--ttl 10s] [--limit N | --shared] [--lock-delay D] [--wait [--timeout 30s]]"},
		{[]string{"acquire", "jobs/x", "--help"}, "-holder name"},
		{[]string{"kv", "-h"}, "Usage: tenure kv COMMAND"},
		{[]string{"kv", "put", "--help"}, "Usage: tenure kv put KEY VALUE --lease NAME --token T"},
		{[]string{"watch", "-h"}, "Ctrl-C exits 0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := runCLI(t.Context(), nil, tt.args...)
			if res.code != exitOK || !strings.Contains(res.stdout, tt.want) || res.stderr != "" {
				t.Errorf("got code %d, stdout %q, stderr %q; want 0 and usage containing %q", res.code, res.stdout, res.stderr, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	c := startCluster(t)
	res := runCLI(t.Context(), nil, "status", "--endpoints", c.addr)
	if res.code != exitOK {
		t.Fatalf("code %d, stderr %q", res.code, res.stderr)
	}
	for _, want := range []string{
		"endpoint       " + c.addr, "cluster        c-0123abcd", "node           n1", "state          leader",
		"leader         n1 (127.0.0.1:7400)", "term           2", "applied index  41",
		"commit index   41", "cluster time   1m30s", "last token     9",
		"MEMBER  SUFFRAGE  RAFT ADDRESS    API ADDRESS     LEADER",
		"n1      voter     127.0.0.1:7401  127.0.0.1:7400  *",
		"n2      voter     127.0.0.1:7411  127.0.0.1:7410",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, res.stdout)
		}
	}

	res = runCLI(t.Context(), nil, "status", "-o", "json", "--endpoints", c.addr)
	for _, key := range []string{`"node_id":"n1"`, `"cluster_id":"c-0123abcd"`, `"leader_id":"n1"`, `"applied_index":41`, `"min_ttl":"2s"`, `"suffrage":"voter"`} {
		if !strings.Contains(res.stdout, key) {
			t.Errorf("status -o json lacks %s: %s", key, res.stdout)
		}
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("status -o json = %q: %v", res.stdout, err)
	}
	if st.NodeID != "n1" || st.LeaderID != "n1" || st.Term != 2 || st.CommitIndex != 41 || len(st.Members) != 2 || !st.Members[0].Leader || st.MinTTL != "2s" {
		t.Errorf("status -o json = %+v", st)
	}
}

// TestHelpFlagsOnce: -h lists each flag once, with two dashes, the short
// -o beside --output.
func TestHelpFlagsOnce(t *testing.T) {
	for _, args := range [][]string{{"acquire", "-h"}, {"kv", "get", "-h"}, {"run", "-h"}, {"elect", "-h"}, {"renew", "-h"}} {
		res := runCLI(t.Context(), nil, args...)
		if res.code != exitOK {
			t.Fatalf("%q: code %d", args, res.code)
		}
		flags := res.stdout[strings.Index(res.stdout, "Flags:"):]
		for _, line := range strings.Split(flags, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && !strings.HasPrefix(line, "  -o, --output") {
				t.Errorf("%q: flag line %q has one dash", args, line)
			}
		}
		if n := strings.Count(flags, "--output"); n != 1 {
			t.Errorf("%q: --output listed %d times:\n%s", args, n, flags)
		}
		if strings.Contains(flags, "\n  -output") || strings.Contains(flags, "\n  -o ") {
			t.Errorf("%q: the output flag is listed twice:\n%s", args, flags)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		res := runCLI(t.Context(), nil, args...)
		if res.code != exitOK || !strings.HasPrefix(res.stdout, "tenure ") || !strings.Contains(res.stdout, "go1.") {
			t.Errorf("%q: code %d, stdout %q", args, res.code, res.stdout)
		}
	}
}

// TestCompletionKnowsEveryFlag keeps the completion table in step with
// the flags each command really has.
func TestCompletionKnowsEveryFlag(t *testing.T) {
	global := map[string]bool{"--endpoints": true, "--cluster-id": true, "--output": true, "-o": true, "--request-timeout": true,
		"--cacert": true, "--cert": true, "--key": true}
	check := func(args []string, want []string) {
		t.Helper()
		res := runCLI(t.Context(), nil, append(args, "-h")...)
		var got []string
		for _, line := range strings.Split(res.stdout, "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			for _, f := range strings.Fields(strings.ReplaceAll(line, ",", "")) {
				if strings.HasPrefix(f, "-") && !global[f] {
					got = append(got, f)
				}
			}
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("%q has the flags %q, the completion knows %q", args, got, want)
		}
	}
	for cmd, flags := range commandFlags {
		switch cmd {
		case "kv", "fence", "certs", "auth", "completion", "version", "help":
			continue
		}
		check([]string{cmd}, flags)
	}
	for cmd, subs := range subcommandFlags {
		for sub, flags := range subs {
			check([]string{cmd, sub}, flags)
		}
	}
	// Every command of the usage is completed.
	cmds := topUsage[strings.Index(topUsage, "Commands:"):strings.Index(topUsage, "Global flags")]
	for _, line := range strings.Split(cmds, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "[") && line[2] != ' ' {
			if _, ok := commandFlags[f[0]]; !ok {
				t.Errorf("the command %q is not completed", f[0])
			}
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		res := runCLI(t.Context(), nil, "completion", shell)
		if res.code != exitOK || !strings.Contains(res.stdout, "elect") || !strings.Contains(res.stdout, "print-value-only") {
			t.Errorf("completion %s: code %d, stdout %q", shell, res.code, res.stdout)
		}
	}
	if res := runCLI(t.Context(), nil, "completion", "tcsh"); res.code != exitUsage {
		t.Errorf("completion tcsh: code %d, want 2", res.code)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run the bash script")
	}
	script := runCLI(t.Context(), nil, "completion", "bash").stdout
	for _, tc := range []struct{ line, want string }{
		{"tenure ac", "acquire"},
		{"tenure acquire x --li", "--limit"},
		{"tenure kv l", "list"},
		{"tenure kv get k --pr", "--print-value-only"},
		{"tenure el", "elect"},
		{"tenure elect x --li", "--listen"},
		{"tenure completion f", "fish"},
		{"tenure fence i", "install"},
		{"tenure fence install --sch", "--schema"},
		{"tenure --ver", "--version"},
	} {
		words := strings.Fields(tc.line)
		prog := script + fmt.Sprintf("\nCOMP_WORDS=(%s); COMP_CWORD=%d; _tenure; echo \"${COMPREPLY[@]}\"\n",
			strings.Join(words, " "), len(words)-1)
		out, err := exec.CommandContext(t.Context(), bash, "-c", prog).Output()
		if err != nil || !slices.Contains(strings.Fields(string(out)), tc.want) {
			t.Errorf("completing %q: %q, %v; want %s among them", tc.line, out, err, tc.want)
		}
	}
}

func TestJSONErrors(t *testing.T) {
	c := startCluster(t)
	env := map[string]string{"TENURE_ENDPOINTS": c.addr}
	tests := []struct {
		args []string
		want map[string]any
	}{
		{[]string{"acquire", "jobs/held", "--holder", "a", "-o", "json"}, map[string]any{
			"code": "failed_precondition", "reason": "LEASE_HELD", "name": "jobs/held", "holder": "b", "token": 3.0,
			"remaining": "4.2s", "exit_code": 3.0, "message": "jobs/held is held by b (token 3, 4.2s remaining)"}},
		{[]string{"acquire", "jobs/held", "--holder", "a", "--wait", "--timeout", "2s", "-o", "json"}, map[string]any{
			"code": "failed_precondition", "reason": "LEASE_HELD", "holder": "b", "token": 3.0, "waited": "2s", "exit_code": 3.0}},
		{[]string{"renew", "jobs/x", "--token", "2", "-o", "json"}, map[string]any{
			"code": "failed_precondition", "reason": "STALE_TOKEN", "exit_code": 4.0}},
		{[]string{"release", "jobs/x", "--token", "2", "-o", "json"}, map[string]any{
			"code": "failed_precondition", "reason": "STALE_TOKEN", "name": "jobs/x", "token": 2.0, "exit_code": 7.0}},
		{[]string{"get", "jobs/none", "-o", "json"}, map[string]any{
			"code": "not_found", "reason": "NOT_FOUND", "message": `lease "jobs/none" not found`, "exit_code": 6.0}},
		{[]string{"acquire", "jobs/x", "--ttl", "1s", "-o", "json"}, map[string]any{"code": "invalid_argument", "exit_code": 2.0}},
		{[]string{"acquire", "-o", "json"}, map[string]any{"code": "invalid_argument", "reason": "USAGE", "message": "missing NAME", "exit_code": 2.0}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := runCLI(t.Context(), env, tt.args...)
			var got map[string]any
			if err := json.Unmarshal([]byte(res.stderr), &got); err != nil || strings.Count(res.stderr, "\n") != 1 {
				t.Fatalf("stderr %q is not one JSON line: %v", res.stderr, err)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %#v, want %#v (all: %s)", k, got[k], v, res.stderr)
				}
			}
			if code, _ := got["exit_code"].(float64); int(code) != res.code {
				t.Errorf("exit_code %v, but exited %d", got["exit_code"], res.code)
			}
		})
	}
}

func TestKVValueOutput(t *testing.T) {
	c := startCluster(t, func(s *fakeserver.Server) {
		s.KVGet = func(_ context.Context, req *tenurev1.KVGetRequest) (*tenurev1.KVGetResponse, error) {
			return &tenurev1.KVGetResponse{Key: req.GetKey(), Value: []byte{0, 0xff, '\n'}, Lease: "jobs/x", Token: 3, Revision: 7}, nil
		}
	})
	env := map[string]string{"TENURE_ENDPOINTS": c.addr}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "get", "bin"}, "bin = base64:AP8K (binary, 3 bytes; lease jobs/x, token 3, revision 7)\n"},
		{[]string{"kv", "get", "bin", "-o", "json"}, `{"key":"bin","value":"AP8K","encoding":"base64","lease":"jobs/x","token":3,"revision":7}` + "\n"},
		{[]string{"kv", "get", "bin", "--print-value-only"}, "\x00\xff\n"},
	} {
		if res := runCLI(t.Context(), env, tt.args...); res.code != exitOK || res.stdout != tt.want {
			t.Errorf("%q: code %d, stdout %q; want %q", tt.args, res.code, res.stdout, tt.want)
		}
	}
	if res := runCLI(t.Context(), env, "kv", "get", "bin", "--print-value-only", "-o", "json"); res.code != exitUsage {
		t.Errorf("--print-value-only with -o json: code %d, want 2", res.code)
	}
}

func TestJSONErrorUnreachable(t *testing.T) {
	res := runCLI(t.Context(), nil, "get", "jobs/x", "-o", "json", "--endpoints", fakeserver.DeadAddr(t), "--request-timeout", "100ms")
	var got map[string]any
	if err := json.Unmarshal([]byte(res.stderr), &got); err != nil || got["code"] != "unavailable" || got["exit_code"] != 1.0 {
		t.Errorf("unreachable with -o json: code %d, stderr %q", res.code, res.stderr)
	}
}

// TestExitCodeTables: the exit-code tables of the README and docs/cli.md
// list exactly the CLI's exit codes.
func TestExitCodeTables(t *testing.T) {
	want := slices.Sorted(slices.Values(exitCodes))
	for _, file := range []string{"../../README.md", "../../docs/cli.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		table := string(data)[strings.Index(string(data), "| exit code | meaning |"):]
		var got []int
		for _, line := range strings.Split(table, "\n")[2:] {
			if !strings.HasPrefix(line, "| ") {
				break
			}
			var code int
			if _, err := fmt.Sscanf(line, "| %d |", &code); err != nil {
				t.Fatalf("%s: row %q: %v", file, line, err)
			}
			got = append(got, code)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the exit codes %v, the CLI has %v", file, got, want)
		}
	}
}

// TestElectLost: when the server says the leadership's grant is gone,
// elect says so and exits 4.
func TestElectLost(t *testing.T) {
	var renewals atomic.Int32
	c := startCluster(t, func(s *fakeserver.Server) {
		s.Renew = func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
			r := req.GetLeases()[0]
			res := &tenurev1.RenewResult{Name: r.GetName(), Token: r.GetToken()}
			if renewals.Add(1) == 1 { // the confirmation of the grant
				res.Lease = protoLease(r.GetName(), "p1", r.GetToken(), 2*time.Second)
			} else {
				err := stale(r.GetName(), r.GetToken())
				res.Reason, res.Message = lease.Reason(err), err.Error()
			}
			return &tenurev1.RenewResponse{Results: []*tenurev1.RenewResult{res}}, nil
		}
	})
	res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, "elect", "svc/x", "p1", "--ttl", "2s")
	if want := "leading svc/x as p1, token 3\n"; res.code != exitFenced || res.stdout != want ||
		!strings.HasPrefix(res.stderr, "tenure: leadership of svc/x lost: ") {
		t.Errorf("got code %d, stdout %q, stderr %q; want 4, %q and the loss", res.code, res.stdout, res.stderr, want)
	}
}

// A follower's lease count and last token are its applied state, which
// may trail the leader: status says so; a leader's figures need no label.
func TestStatusLabelsAFollowersFigures(t *testing.T) {
	f := statusText(client.Status{NodeID: "n2", State: "follower", AppliedIndex: 123, LastToken: 19, Leases: 3})
	for _, want := range []string{
		"leases         3 (as of applied index 123 on this follower; the leader may be ahead)",
		"last token     19 (as of applied index 123 on this follower; the leader may be ahead)",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("follower status lacks %q:\n%s", want, f)
		}
	}
	if l := statusText(client.Status{NodeID: "n1", State: "leader", AppliedIndex: 123, LastToken: 20}); strings.Contains(l, "as of") {
		t.Errorf("leader status is labelled:\n%s", l)
	}
}

// TestElectLockDelay: elect --lock-delay asks for the lock-delay with the
// leadership's grant; a negative one, or one with --listen, is a usage
// error that sends nothing.
func TestElectLockDelay(t *testing.T) {
	var acquires atomic.Int32
	asked := make(chan time.Duration, 1)
	c := startCluster(t, func(s *fakeserver.Server) {
		s.Acquire = func(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			acquires.Add(1)
			select {
			case asked <- req.GetLockDelay().AsDuration():
			default:
			}
			return &tenurev1.AcquireResponse{Lease: protoLease(req.GetName(), req.GetHolder(), 3, req.GetTtl().AsDuration())}, nil
		}
	})
	env := map[string]string{"TENURE_ENDPOINTS": c.addr}
	for _, args := range [][]string{
		{"elect", "svc/x", "p1", "--lock-delay", "-1s"},
		{"elect", "--listen", "svc/x", "--lock-delay", "5s"},
	} {
		if res := runCLI(t.Context(), env, args...); res.code != exitUsage {
			t.Errorf("tenure %v: code %d, stderr %q; want %d", args, res.code, res.stderr, exitUsage)
		}
	}
	if n := acquires.Load(); n != 0 {
		t.Fatalf("the usage errors sent %d acquires", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- runCLI(ctx, env, "elect", "svc/x", "p1", "--ttl", "2s", "--lock-delay", "15s") }()
	select {
	case got := <-asked:
		if got != 15*time.Second {
			t.Errorf("elect --lock-delay 15s asked for a lock-delay of %s", got)
		}
	case res := <-done:
		t.Fatalf("elect ended before campaigning: %+v", res)
	}
	cancel()
	<-done
}
