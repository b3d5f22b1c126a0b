package redisfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/redisfence"
)

// TestUpdate plays the lost update of docs/fencing.md. A (token 1) has
// written; its lease expired and B (token 2) does a read-modify-write of
// a list of writers: read, append itself, write back. Between B's read
// and B's write, A wakes up and writes its own list (token 1).
//
// With Update (a fenced Get, which records token 2), A's write is
// refused. With a plain GET (the bug, run here to show that the test
// catches it), A's write passes the fence, which B had not raised yet,
// and B's write then replaces the list with one computed from before
// A's write: A was told ok and its write is gone.
func TestUpdate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fenced   bool
		wantLost bool
	}{
		{"Update", true, false},
		{"plain GET (the bug)", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRedis(t)
			ctx := context.Background()
			key := r.key("reports", "writers")
			a, b := fence.Grant("reports", 1), fence.Grant("reports", 2)
			if err := r.f.Update(ctx, a, key, func(old string, _ bool) (string, error) { return old + "A1;", nil }); err != nil {
				t.Fatal(err)
			}
			var aErr error
			lateWrite := func() {
				// A's own read-modify-write, from what it read before
				// its pause.
				aErr = r.f.Set(ctx, a, key, "A1;A2;", 0)
			}
			var err error
			if tc.fenced {
				err = r.f.Update(ctx, b, key, func(old string, _ bool) (string, error) {
					lateWrite() // A wakes up between B's read and B's write
					return old + "B;", nil
				})
			} else {
				var old string
				if old, err = r.rdb.Get(ctx, key).Result(); err == nil {
					lateWrite()
					err = r.f.Set(ctx, b, key, old+"B;", 0)
				}
			}
			if err != nil {
				t.Fatalf("B: %v", err)
			}
			list, err := r.rdb.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("A's late write: %v; list %q", aErr, list)
			lost := aErr == nil && !strings.Contains(list, "A2;")
			if lost != tc.wantLost {
				t.Fatalf("A's late write: %v; list %q; lost update %t, want %t", aErr, list, lost, tc.wantLost)
			}
			if tc.fenced {
				fencetest.WantStale(t, aErr, 1, 2)
				if list != "A1;B;" {
					t.Fatalf("list = %q, want A's first write and B's", list)
				}
			}
		})
	}
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
