package httpfence_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/filefence"
	"github.com/tenure-io/tenure/fence/httpfence"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/fence/redisfence"
)

// waitFor polls cond until it holds, failing t after 10s with what was
// awaited.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestConcurrentRequests sends many requests with mixed tokens to a
// service whose handler appends to a log, with the fence in memory and in
// each store, and one stale client held back until a newer one was
// answered. Afterwards: exactly the requests answered 200 are in the log,
// whose tokens never go down; every request answered 409 left nothing.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fence func(t *testing.T) httpfence.Fence
	}{
		{"memory", func(*testing.T) httpfence.Fence { return httpfence.NewMemory() }},
		{"postgres", func(t *testing.T) httpfence.Fence { return httpfence.Stored(pgFence(t)) }},
		{"redis", func(t *testing.T) httpfence.Fence { return httpfence.Stored(redisFence(t)) }},
		{"files", func(t *testing.T) httpfence.Fence {
			d, err := filefence.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return httpfence.Stored(d)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var log []string
			srv := httptest.NewServer(httpfence.Middleware(httpfence.Config{Fence: tc.fence(t)},
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					defer mu.Unlock()
					log = append(log, r.URL.Query().Get("w"))
				})))
			defer srv.Close()

			type outcome struct {
				writer int
				token  uint64
				err    error
			}
			write := func(w int, tok uint64) outcome {
				c := &http.Client{Transport: &httpfence.Transport{Lease: fence.Grant("svc/7", tok)}}
				resp, err := c.Post(fmt.Sprintf("%s/?w=%d+%d", srv.URL, w, tok), "text/plain", nil)
				if err != nil {
					return outcome{w, tok, err}
				}
				defer resp.Body.Close()
				if err := httpfence.CheckResponse(resp); err != nil {
					return outcome{w, tok, err}
				}
				if resp.StatusCode != 200 {
					return outcome{w, tok, fmt.Errorf("status %d", resp.StatusCode)}
				}
				return outcome{w, tok, nil}
			}
			const waves, perWave = 5, 8
			const writers = waves * perWave
			const newer, paused = writers, writers + 1
			results := make(chan outcome, writers+2)
			var wg sync.WaitGroup
			start := startWaves(&wg, waves, perWave, func(i int) {
				results <- write(i, uint64((i/perWave)*5+1+(i*7)%5))
			})
			newerDone := make(chan struct{})
			wg.Go(func() { <-newerDone; results <- write(paused, 3) })
			wg.Go(func() {
				<-start[waves-1]
				o := write(newer, 30)
				close(newerDone)
				results <- o
			})
			wg.Wait()
			close(results)

			ok := map[int]uint64{}
			stale := map[int]bool{}
			for o := range results {
				switch {
				case o.err == nil:
					ok[o.writer] = o.token
				case errors.Is(o.err, fence.ErrStale):
					stale[o.writer] = true
				default:
					t.Fatalf("writer %d: %v", o.writer, o.err)
				}
			}
			if !stale[paused] {
				t.Fatal("the paused writer with token 3 was not refused")
			}
			if _, in := ok[newer]; !in {
				t.Fatal("the writer with token 30 was refused")
			}
			if len(log) != len(ok) {
				t.Fatalf("%d handled for %d answered 200", len(log), len(ok))
			}
			var last uint64
			for i, e := range log {
				var w int
				var tok uint64
				fmt.Sscanf(e, "%d %d", &w, &tok)
				if ok[w] != tok || stale[w] {
					t.Fatalf("log %d: %q was not answered 200", i, e)
				}
				if tok < last {
					t.Fatalf("log %d: token %d handled after %d", i, tok, last)
				}
				last = tok
			}
			t.Logf("%d requests handled, %d refused as stale", len(ok), len(stale))
		})
	}
}

// pgFence returns a Postgres fence in a schema of its own, dropped when t
// ends.
func pgFence(t *testing.T) *pgfence.Fence {
	t.Helper()
	url := os.Getenv("TENURE_TEST_POSTGRES")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		t.Fatalf("Postgres is not reachable at %s: %v\nStart it (.ci/run does) or set TENURE_TEST_POSTGRES.", url, err)
	}
	schema := "tenure_test_" + strings.ToLower(rand.Text()[:12])
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	if _, err := pgfence.Install(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	f, err := pgfence.New(ctx, pool, pgfence.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// redisFence returns a Redis fence under a key prefix of its own, whose
// keys are deleted when t ends.
func redisFence(t *testing.T) *redisfence.Fence {
	t.Helper()
	addr := os.Getenv("TENURE_TEST_REDIS")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Fatalf("Redis is not reachable at %s: %v\nStart it (.ci/run does) or set TENURE_TEST_REDIS.", addr, err)
	}
	prefix := "tenure-test:" + strings.ToLower(rand.Text()[:12]) + ":"
	t.Cleanup(func() {
		if keys, _ := rdb.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	f, err := redisfence.New(rdb, redisfence.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// startWaves runs waves of perWave calls of fn(i), i counting from 0, on
// wg: wave k starts when wave k-1 has finished. It returns a channel per
// wave, closed when the wave starts.
func startWaves(wg *sync.WaitGroup, waves, perWave int, fn func(i int)) []chan struct{} {
	start := make([]chan struct{}, waves+1)
	for k := range start {
		start[k] = make(chan struct{})
	}
	for k := range waves {
		var wave sync.WaitGroup
		for j := range perWave {
			wave.Add(1)
			wg.Go(func() {
				defer wave.Done()
				<-start[k]
				fn(k*perWave + j)
			})
		}
		wg.Go(func() { <-start[k]; wave.Wait(); close(start[k+1]) })
	}
	close(start[0])
	return start[:waves]
}
