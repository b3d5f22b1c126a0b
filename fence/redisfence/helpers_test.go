package redisfence_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-io/tenure/fence/redisfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// testRedis is a client and a key prefix of one test's own; every key
// under the prefix is deleted when the test ends.
type testRedis struct {
	rdb    *redis.Client
	prefix string
	f      *redisfence.Fence
}

// newRedis fails tb, saying what to start, when Redis does not answer.
func newRedis(tb testing.TB) *testRedis {
	tb.Helper()
	rdb, prefix := storetest.Redis(tb)
	f, err := redisfence.New(rdb, redisfence.Config{Prefix: prefix + "fence:"})
	if err != nil {
		tb.Fatal(err)
	}
	return &testRedis{rdb: rdb, prefix: prefix, f: f}
}

// key returns a data key of the test, tagged with resource.
func (r *testRedis) key(resource, name string) string {
	return r.prefix + name + ":{" + resource + "}"
}

// dump returns every key of the test with its type and value, to check
// that a refused write changed nothing.
func (r *testRedis) dump(tb testing.TB) map[string]string {
	tb.Helper()
	ctx := context.Background()
	keys, err := r.rdb.Keys(ctx, r.prefix+"*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		d, err := r.rdb.Dump(ctx, k).Result()
		if err != nil {
			tb.Fatal(err)
		}
		out[k] = d
	}
	return out
}
