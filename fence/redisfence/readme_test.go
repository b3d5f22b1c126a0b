package redisfence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/storetest"
)

// readmeBlock returns the first code block of language lang that follows
// the heading in scripts/README.md.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	md, err := os.ReadFile("scripts/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(md), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("scripts/README.md has no heading %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("scripts/README.md: no ```%s block after %q", lang, heading)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("scripts/README.md: the ```%s block after %q does not end", lang, heading)
	}
	return block + "\n"
}

// redisPython returns a python3 that can import redis-py: the first one on
// PATH, or Debian's /usr/bin/python3 (where apt-get install python3-redis
// puts it) when another python3 comes first on PATH.
func redisPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			tried = append(tried, p+": "+err.Error())
			continue
		}
		out, err := exec.Command(path, "-c", "import redis; print(redis.__version__)").CombinedOutput()
		if err == nil {
			t.Logf("%s with redis-py %s", path, bytes.TrimSpace(out))
			return path
		}
		tried = append(tried, path+": "+strings.TrimSpace(string(out)))
	}
	t.Fatalf("no python3 that can import redis (redis-py): apt-get install python3-redis (.ci/run does)\n%s", strings.Join(tried, "\n"))
	return ""
}

// readmePythonDriver runs after the README's block (which defines r and
// write_report): it writes as tokens 8, 7 (late) and 9 would, and prints
// what happened as JSON. The block's redis.Redis() is pointed at the
// test's Redis first.
const readmePythonDriver = `
import json, os, sys
lease = os.environ["LEASE"]
out = {}
write_report(lease, 8, "from token 8")
try:
    write_report(lease, 7, "late, from token 7")
    out["stale"] = None
except RuntimeError as e:
    out["stale"] = str(e)
    out["cause"] = str(e.__cause__)
out["after_stale"] = r.get(f"report:{{{lease}}}").decode()
write_report(lease, 9, "from token 9")
out["value"] = r.get(f"report:{{{lease}}}").decode()
out["fence"] = r.get(f"tenure:fence:{{{lease}}}").decode()
print(json.dumps(out))
`

const readmePythonPrelude = `
import os, redis
class _TestRedis(redis.Redis):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("host", os.environ["REDIS_HOST"])
        kwargs.setdefault("port", int(os.environ["REDIS_PORT"]))
        super().__init__(*args, **kwargs)
redis.Redis = _TestRedis
`

// TestREADMEPython runs the redis-py example of scripts/README.md as
// written (from the repository's root, as its path to the scripts
// assumes) with Debian's python3-redis: a write with token 8 passes, a
// late one with token 7 is refused with TENURE_STALE 8 and changes
// nothing, one with token 9 passes.
func TestREADMEPython(t *testing.T) {
	t.Parallel()
	py := redisPython(t)
	rdb, _ := storetest.Redis(t)
	block := readmeBlock(t, "## From Python (redis-py)", "python")
	lease := storetest.Name("readme-py/")
	ctx := context.Background()
	t.Cleanup(func() {
		rdb.Del(ctx, "tenure:fence:{"+lease+"}", "report:{"+lease+"}")
	})
	file := filepath.Join(t.TempDir(), "readme_example.py")
	if err := os.WriteFile(file, []byte(readmePythonPrelude+block+readmePythonDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(storetest.RedisAddr(), ":")
	cmdCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cmdCtx, py, file)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "LEASE="+lease, "REDIS_HOST="+host, "REDIS_PORT="+port)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the README's Python example (%s, driven by %s): %v\nstdout:\n%s\nstderr:\n%s", py, file, err, out, stderr.String())
	}
	t.Logf("the README's Python example: %s", out)
	var got struct {
		Stale      *string `json:"stale"`
		Cause      string  `json:"cause"`
		AfterStale string  `json:"after_stale"`
		Value      string  `json:"value"`
		Fence      string  `json:"fence"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the example's output %q: %v", out, err)
	}
	if got.Stale == nil {
		t.Fatal("the late write with token 7 was not refused")
	}
	if *got.Stale != "a newer holder wrote (highest token 8)" || !strings.HasPrefix(got.Cause, "TENURE_STALE 8") {
		t.Fatalf("the late write with token 7: %q (cause %q); want the example's error for TENURE_STALE 8", *got.Stale, got.Cause)
	}
	if got.AfterStale != "from token 8" || got.Value != "from token 9" || got.Fence != "9" {
		t.Fatalf("values: after the late write %q, at the end %q, fence %q; want \"from token 8\", \"from token 9\", \"9\"",
			got.AfterStale, got.Value, got.Fence)
	}
}
