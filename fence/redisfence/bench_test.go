package redisfence_test

import (
	"context"
	"testing"

	"github.com/tenure-io/tenure/fence"
)

// BenchmarkRedis compares SET with the fenced SET (Fence.Set), one at a
// time on one connection: the cost of the guard.
func BenchmarkRedis(b *testing.B) {
	r := newRedis(b)
	ctx := context.Background()
	key := r.key("bench", "v")
	b.Run("unfenced", func(b *testing.B) {
		for b.Loop() {
			if err := r.rdb.Set(ctx, key, "value", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		l := fence.Grant("bench", 1)
		for b.Loop() {
			if err := r.f.Set(ctx, l, key, "value", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
