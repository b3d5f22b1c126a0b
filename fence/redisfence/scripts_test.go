package redisfence_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence/redisfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// TestScriptFilesAreTheScripts checks that the package runs the shipped
// files: Scripts has every file of scripts/ with the same text, and every
// guarded script holds the same check and record blocks.
func TestScriptFilesAreTheScripts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil || len(files) < 6 {
		t.Fatalf("scripts/*.lua: %v, %v", files, err)
	}
	got := redisfence.Scripts()
	if len(got) != len(files) {
		t.Fatalf("Scripts has %d scripts, scripts/ %d files", len(got), len(files))
	}
	block := func(s, name string) string {
		i := strings.Index(s, "-- tenure:"+name+" begin\n")
		j := strings.Index(s, "-- tenure:"+name+" end\n")
		if i < 0 || j < i {
			return ""
		}
		return s[i:j]
	}
	advance := got["advance.lua"]
	check, record := block(advance, "check"), block(advance, "record")
	if check == "" || record == "" {
		t.Fatal("advance.lua has no check or record block")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		if got[name] != string(b) {
			t.Fatalf("Scripts()[%q] is not the file's text", name)
		}
		if name == "highest.lua" {
			continue
		}
		if block(string(b), "check") != check || block(string(b), "record") != record {
			t.Errorf("%s: its check or record block differs from advance.lua's", name)
		}
	}
}

// TestRedisCLI fences writes with the shipped scripts from redis-cli
// alone, as a shell script in any language's stead would: SCRIPT LOAD
// and EVALSHA for set.lua, EVAL for get.lua. No Go Redis client is in
// the path of the writes (the test reads the result with redis-cli too).
func TestRedisCLI(t *testing.T) {
	t.Parallel()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is not on PATH: apt-get install redis-tools")
	}
	_, prefix := storetest.Redis(t) // a key prefix of the test's own, removed at its end
	host, port, _ := strings.Cut(storetest.RedisAddr(), ":")
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		t.Logf("redis-cli %s\n-> %s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	set, err := os.ReadFile("scripts/set.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(set)
	sha := run(string(set), "-x", "SCRIPT", "LOAD")
	if sha != hex.EncodeToString(sum[:]) {
		t.Fatalf("SCRIPT LOAD = %q, want the file's SHA1 %x", sha, sum)
	}
	fkey, key := prefix+"fence:{reports/daily}", prefix+"report:{reports/daily}"
	if out := run("", "EVALSHA", sha, "2", fkey, key, "7", "from token 7", "0"); out != "OK" {
		t.Fatalf("the write with token 7: %q", out)
	}
	if out := run("", "EVALSHA", sha, "2", fkey, key, "8", "from token 8", "0"); out != "OK" {
		t.Fatalf("the write with token 8: %q", out)
	}
	if out := run("", "EVALSHA", sha, "2", fkey, key, "7", "late, from token 7", "0"); out != "TENURE_STALE 8" {
		t.Fatalf("the late write with token 7: %q; want TENURE_STALE 8", out)
	}
	if out := run("", "EVALSHA", sha, "2", fkey, key, "007", "x", "0"); !strings.HasPrefix(out, "TENURE_INVALID ") {
		t.Fatalf("token 007: %q; want TENURE_INVALID", out)
	}
	if out := run("", "GET", key); out != "from token 8" {
		t.Fatalf("GET = %q; want the write with token 8", out)
	}
	// A fenced read with EVAL: token 9 reads and raises the fence, so
	// token 8 can no longer write.
	get, err := os.ReadFile("scripts/get.lua")
	if err != nil {
		t.Fatal(err)
	}
	if out := run("", "EVAL", string(get), "2", fkey, key, "9"); out != "from token 8" {
		t.Fatalf("fenced GET with token 9 = %q", out)
	}
	if out := run("", "EVALSHA", sha, "2", fkey, key, "8", "late, from token 8", "0"); out != "TENURE_STALE 9" {
		t.Fatalf("the write with token 8 after the read with 9: %q; want TENURE_STALE 9", out)
	}
	if out := run("", "GET", fkey); out != "9" {
		t.Fatalf("the fence = %q, want 9", out)
	}
}

// TestScriptsRefuseBadInput runs the scripts as another language's client
// would, with arguments no Go check filtered: the scripts refuse them
// themselves, and change nothing.
func TestScriptsRefuseBadInput(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	set := redisfence.Scripts()["set.lua"]
	fkey, key := r.prefix+"fence:{r}", r.prefix+"v:{r}"
	if err := r.rdb.Eval(ctx, set, []string{fkey, key}, "5", "ok", "0").Err(); err != nil {
		t.Fatal(err)
	}
	before := r.dump(t)
	for _, tc := range []struct {
		keys []string
		args []any
	}{
		{[]string{fkey, key}, []any{"0", "x", "0"}},
		{[]string{fkey, key}, []any{"-6", "x", "0"}},
		{[]string{fkey, key}, []any{"06", "x", "0"}},
		{[]string{fkey, key}, []any{"6.0", "x", "0"}},
		{[]string{fkey, key}, []any{"18446744073709551616", "x", "0"}},
		{[]string{fkey, key}, []any{"", "x", "0"}},
		{[]string{fkey, key}, nil},
		{[]string{"", key}, []any{"6", "x", "0"}},
		{nil, []any{"6", "x", "0"}},
	} {
		err := r.rdb.Eval(ctx, set, tc.keys, tc.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "TENURE_INVALID ") {
			t.Fatalf("KEYS %q ARGV %q: %v; want TENURE_INVALID", tc.keys, tc.args, err)
		}
	}
	if after := r.dump(t); !maps.Equal(after, before) {
		t.Fatalf("bad input changed the keys: %v -> %v", before, after)
	}
	if err := r.rdb.Eval(ctx, set, []string{fkey, key}, "18446744073709551615", "max", "0").Err(); err != nil {
		t.Fatalf("token 2^64-1: %v", err)
	}
	if h, err := r.f.Highest(ctx, "r"); err != nil || h != 1<<64-1 {
		t.Fatalf("Highest = %d, %v; want 2^64-1", h, err)
	}
}
