package httpfence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/filefence"
	"github.com/tenure-io/tenure/fence/httpfence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/fence/redisfence"
	"github.com/tenure-io/tenure/internal/storetest"
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

			write := func(w int, tok uint64) error {
				c := &http.Client{Transport: &httpfence.Transport{Lease: fence.Grant("svc/7", tok)}}
				resp, err := c.Post(fmt.Sprintf("%s/?w=%d+%d", srv.URL, w, tok), "text/plain", nil)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if err := httpfence.CheckResponse(resp); err != nil {
					return err
				}
				if resp.StatusCode != 200 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			res := fencetest.Waves{Waves: 5, PerWave: 8, Newer: 30}.Run(t, write)
			res.CheckLog(t, fencetest.ParseLog(t, log), true)
		})
	}
}

// pgFence returns a Postgres fence in a schema of its own, dropped when t
// ends.
func pgFence(t *testing.T) *pgfence.Fence {
	t.Helper()
	ctx := context.Background()
	schema := storetest.Schema(t)
	pool := storetest.Pool(t, schema)
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
	rdb, prefix := storetest.Redis(t)
	f, err := redisfence.New(rdb, redisfence.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return f
}
