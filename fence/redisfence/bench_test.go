package redisfence_test

import (
	"context"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/internal/benchpair"
)

// BenchmarkRedis compares SET with the fenced SET (Fence.Set), one at a
// time on one connection: the cost of the guard.
func BenchmarkRedis(b *testing.B) {
	r := newRedis(b)
	ctx := context.Background()
	key := r.key("bench", "v")
	l := fence.Grant("bench", 1)
	unfenced := func() error { return r.rdb.Set(ctx, key, "value", 0).Err() }
	fenced := func() error { return r.f.Set(ctx, l, key, "value", 0) }
	benchpair.Compare(b, unfenced, fenced)
}
