package redisfence_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-io/tenure/fence/redisfence"
)

// redisAddr is the server the tests use: $TENURE_TEST_REDIS, or the one
// .ci/run starts.
func redisAddr() string {
	if a := os.Getenv("TENURE_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		tb.Fatalf("Redis is not reachable at %s: %v\nStart it (.ci/run does: redis-server --daemonize yes --port 6379) or set TENURE_TEST_REDIS to host:port.", redisAddr(), err)
	}
	prefix := "tenure-test:" + strings.ToLower(rand.Text()[:12]) + ":"
	tb.Cleanup(func() {
		defer rdb.Close()
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			tb.Errorf("list the test's keys: %v", err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("delete the test's keys: %v", err)
			}
		}
	})
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
