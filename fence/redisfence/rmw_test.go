package redisfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/redisfence"
)

// TestUpdate plays the lost update of docs/fencing.md (see
// fencetest.ReadModifyWrite) on a string key: Update (a fenced Get,
// which records token 2) is the fenced read-modify-write, a plain GET
// the bug.
func TestUpdate(t *testing.T) {
	t.Parallel()
	fencetest.ReadModifyWrite(t, func(t *testing.T) fencetest.RMW {
		r := newRedis(t)
		key := r.key("reports", "writers")
		return fencetest.RMW{
			Write: func(ctx context.Context, l fence.Lease, list string) error {
				return r.f.Set(ctx, l, key, list, 0)
			},
			Read: func(ctx context.Context) (string, error) { return r.rdb.Get(ctx, key).Result() },
			Update: func(ctx context.Context, l fence.Lease, modify func(string) string) error {
				return r.f.Update(ctx, l, key, func(old string, _ bool) (string, error) { return modify(old), nil })
			},
		}
	})
}

func TestGet(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	key := r.key("g", "v")
	if v, found, err := r.f.Get(ctx, fence.Grant("g", 3), key); err != nil || found || v != "" {
		t.Fatalf("Get of no key = %q, %t, %v", v, found, err)
	}
	if h, _ := r.f.Highest(ctx, "g"); h != 3 {
		t.Fatalf("a fenced read did not record its token: highest %d", h)
	}
	if err := r.f.Set(ctx, fence.Grant("g", 3), key, "three", 0); err != nil {
		t.Fatal(err)
	}
	if v, found, err := r.f.Get(ctx, fence.Grant("g", 4), key); err != nil || !found || v != "three" {
		t.Fatalf("Get = %q, %t, %v; want three", v, found, err)
	}
	_, _, err := r.f.Get(ctx, fence.Grant("g", 3), key)
	fencetest.WantStale(t, err, 3, 4)
	if _, err := r.rdb.HSet(ctx, r.key("g", "h"), "f", "v").Result(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.f.Get(ctx, fence.Grant("g", 4), r.key("g", "h")); !errors.Is(err, redisfence.ErrWrongType) {
		t.Fatalf("Get of a hash: %v; want ErrWrongType", err)
	}
}
