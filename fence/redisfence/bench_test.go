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
	for _, bc := range []struct {
		name string
		op   func() error
	}{{"unfenced", unfenced}, {"fenced", fenced}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// Both alternately, for a ratio that the machine's load affects on
	// both sides alike.
	b.Run("paired", func(b *testing.B) { benchpair.Run(b, unfenced, fenced) })
}
