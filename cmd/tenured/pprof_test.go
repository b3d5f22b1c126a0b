package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The profiler is served only on --pprof-listen's own address, never on
// the API's.
func TestProfilerOnlyOnItsOwnListener(t *testing.T) {
	for _, withPprof := range []bool{false, true} {
		args := []string{"--dev", "--election-timeout", "100ms", "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}
		if withPprof {
			args = append(args, "--pprof-listen", "127.0.0.1:0")
		}
		var out syncBuffer
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		go func() { done <- run(ctx, args, io.Discard, &out, noEnv) }()
		api := regexp.MustCompile(`msg=serving api=(\S+)`)
		prof := regexp.MustCompile(`pprof=(\S+)`)
		deadline := time.Now().Add(20 * time.Second)
		for api.FindStringSubmatch(out.String()) == nil || (withPprof && prof.FindStringSubmatch(out.String()) == nil) {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("tenured %s did not start within 20s:\n%s", strings.Join(args, " "), out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		get := func(addr string) int {
			t.Helper()
			res, err := http.Get("http://" + addr + "/debug/pprof/")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		if code := get(api.FindStringSubmatch(out.String())[1]); code != http.StatusNotFound {
			t.Errorf("pprof %v: GET /debug/pprof/ on the API port answered %d, want 404", withPprof, code)
		}
		if withPprof {
			if code := get(prof.FindStringSubmatch(out.String())[1]); code != http.StatusOK {
				t.Errorf("GET /debug/pprof/ on --pprof-listen answered %d, want 200", code)
			}
		}
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d:\n%s", code, out.String())
		}
	}
}
