package redisfence_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/redisfence"
)

func TestSet(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	key := r.key("jobs/x", "report")
	for _, s := range []struct {
		token   uint64
		stale   bool
		highest uint64
	}{{5, false, 5}, {5, false, 5}, {7, false, 7}, {6, true, 7}, {9, false, 9}, {1, true, 9}} {
		err := r.f.Set(ctx, fence.Grant("jobs/x", s.token), key, fmt.Sprintf("v%d", s.token), 0)
		if s.stale {
			fencetest.WantStale(t, err, s.token, s.highest)
		} else if err != nil {
			t.Fatalf("Set with token %d: %v", s.token, err)
		}
	}
	if v, _ := r.rdb.Get(ctx, key).Result(); v != "v9" {
		t.Fatalf("value = %q, want v9", v)
	}
	if h, err := r.f.Highest(ctx, "jobs/x"); err != nil || h != 9 {
		t.Fatalf("Highest = %d, %v; want 9", h, err)
	}
	if v, _ := r.rdb.Get(ctx, r.f.FenceKey("jobs/x")).Result(); v != "9" {
		t.Fatalf("fence key = %q, want \"9\"", v)
	}
	// With a TTL.
	if err := r.f.Set(ctx, fence.Grant("jobs/x", 9), key, "short", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := r.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("PTTL = %s, want up to 1m", ttl)
	}
}

func TestBigTokens(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	key := r.key("big", "v")
	// Above 2^53 a Lua number would round these to the same value.
	const big = uint64(1)<<60 + 1
	for _, tok := range []uint64{9, 10, big} {
		if err := r.f.Set(ctx, fence.Grant("big", tok), key, "x", 0); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	fencetest.WantStale(t, r.f.Set(ctx, fence.Grant("big", big-1), key, "x", 0), big-1, big)
	fencetest.WantStale(t, r.f.Set(ctx, fence.Grant("big", 99), key, "x", 0), 99, big)
	if err := r.f.Set(ctx, fence.Grant("big", ^uint64(0)), key, "max", 0); err != nil {
		t.Fatal(err)
	}
}

func TestHSetAndDel(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	h := r.key("shard", "h")
	n, err := r.f.HSet(ctx, fence.Grant("shard", 3), h, "a", "1", "b", "2")
	if err != nil || n != 2 {
		t.Fatalf("HSet = %d, %v", n, err)
	}
	_, err = r.f.HSet(ctx, fence.Grant("shard", 4), h, "a", "4")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.f.HSet(ctx, fence.Grant("shard", 3), h, "a", "late", "c", "late")
	fencetest.WantStale(t, err, 3, 4)
	if got := r.rdb.HGetAll(ctx, h).Val(); fmt.Sprint(got) != "map[a:4 b:2]" {
		t.Fatalf("hash = %v", got)
	}
	_, err = r.f.Del(ctx, fence.Grant("shard", 2), h)
	fencetest.WantStale(t, err, 2, 4)
	if r.rdb.Exists(ctx, h).Val() != 1 {
		t.Fatal("a stale Del deleted the hash")
	}
	n, err = r.f.Del(ctx, fence.Grant("shard", 4), h, r.key("shard", "missing"))
	if err != nil || n != 1 {
		t.Fatalf("Del = %d, %v; want 1", n, err)
	}
}

func TestScript(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	// A body of the caller's: append to a list, count, return the length.
	s := r.f.Script(`
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
return redis.call('LLEN', KEYS[1])
-- ` + rand.Text()) // a body no server has seen: the first run falls back to EVAL
	list, count := r.key("q", "list"), r.key("q", "count")
	if ok, _ := r.rdb.ScriptExists(ctx, s.Hash()).Result(); len(ok) != 1 || ok[0] {
		t.Fatalf("SCRIPT EXISTS before the first run = %v; want false", ok)
	}
	v, err := s.Run(ctx, fence.Grant("q", 5), []string{list, count}, "first")
	if err != nil || v != int64(1) {
		t.Fatalf("Run = %v, %v; want 1", v, err)
	}
	if ok, _ := r.rdb.ScriptExists(ctx, s.Hash()).Result(); !ok[0] {
		t.Fatal("the script is not cached after EVAL")
	}
	if v, err = s.Run(ctx, fence.Grant("q", 6), []string{list, count}, "second"); err != nil || v != int64(2) {
		t.Fatalf("Run (EVALSHA) = %v, %v; want 2", v, err)
	}
	before := r.dump(t)
	_, err = s.Run(ctx, fence.Grant("q", 5), []string{list, count}, "late")
	fencetest.WantStale(t, err, 5, 6)
	if after := r.dump(t); !maps.Equal(before, after) {
		t.Fatal("a stale script changed keys")
	}
	// A body that fails leaves the fence where it was.
	bad := r.f.Script(`return redis.call('INCR', KEYS[1])`)
	if _, err := bad.Run(ctx, fence.Grant("q", 8), []string{list}); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("INCR on a list = %v; want Redis's error", err)
	}
	if h, _ := r.f.Highest(ctx, "q"); h != 6 {
		t.Fatalf("a failed body raised the fence to %d", h)
	}
}

func TestWrongType(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	list := r.key("w", "list")
	r.rdb.RPush(ctx, list, "x")
	hash := r.key("w", "hash")
	r.rdb.HSet(ctx, hash, "f", "v")
	if err := r.f.Advance(ctx, "w", 5); err != nil {
		t.Fatal(err)
	}
	before := r.dump(t)
	g := fence.Grant("w", 6)
	for name, call := range map[string]func() error{
		"set on a list":  func() error { return r.f.Set(ctx, g, list, "v", 0) },
		"set on a hash":  func() error { return r.f.Set(ctx, g, hash, "v", 0) },
		"hset on a list": func() error { _, err := r.f.HSet(ctx, g, list, "f", "v"); return err },
	} {
		err := call()
		if !errors.Is(err, redisfence.ErrWrongType) || !strings.Contains(err.Error(), "nothing was written") {
			t.Errorf("%s = %v; want ErrWrongType", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// Fence keys that do not hold a token.
	r.rdb.HSet(ctx, r.f.FenceKey("h"), "f", "v")
	r.rdb.Set(ctx, r.f.FenceKey("s"), "not a token", 0)
	before[r.f.FenceKey("h")] = r.rdb.Dump(ctx, r.f.FenceKey("h")).Val()
	before[r.f.FenceKey("s")] = r.rdb.Dump(ctx, r.f.FenceKey("s")).Val()
	for _, res := range []string{"h", "s"} {
		err := r.f.Set(ctx, fence.Grant(res, 1), r.key(res, "v"), "v", 0)
		if !errors.Is(err, redisfence.ErrWrongType) {
			t.Errorf("fence key of %s: %v; want ErrWrongType", res, err)
		}
		if _, err := r.f.Highest(ctx, res); !errors.Is(err, redisfence.ErrWrongType) {
			t.Errorf("Highest of %s: %v; want ErrWrongType", res, err)
		}
	}
	if after := r.dump(t); !maps.Equal(before, after) {
		t.Fatal("a refused write changed keys")
	}
	if h, _ := r.f.Highest(ctx, "w"); h != 5 {
		t.Fatalf("fence = %d after refused writes; want 5", h)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	k := r.key("r", "k")
	for name, call := range map[string]func() error{
		"empty resource":  func() error { return r.f.Set(ctx, fence.Grant("", 1), k, "v", 0) },
		"token 0":         func() error { return r.f.Set(ctx, fence.Grant("r", 0), k, "v", 0) },
		"brace":           func() error { return r.f.Set(ctx, fence.Grant("a}b", 1), k, "v", 0) },
		"empty key":       func() error { return r.f.Set(ctx, fence.Grant("r", 1), "", "v", 0) },
		"negative ttl":    func() error { return r.f.Set(ctx, fence.Grant("r", 1), k, "v", -time.Second) },
		"odd hset":        func() error { _, err := r.f.HSet(ctx, fence.Grant("r", 1), k, "f"); return err },
		"del no keys":     func() error { _, err := r.f.Del(ctx, fence.Grant("r", 1)); return err },
		"advance token 0": func() error { return r.f.Advance(ctx, "r", 0) },
		"script token 0": func() error {
			_, err := r.f.Script("return 1").Run(ctx, fence.Grant("r", 0), nil)
			return err
		},
	} {
		if err := call(); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want fence.ErrInvalid", name, err)
		}
	}
	if d := r.dump(t); len(d) != 0 {
		t.Fatalf("bad input wrote %v", d)
	}
	if _, err := redisfence.New(r.rdb, redisfence.Config{Prefix: "a{b"}); err == nil {
		t.Fatal("New accepted a prefix with a brace")
	}
}

// TestConcurrentWriters runs many guarded scripts with mixed tokens on one
// resource, with one stale writer held back until a newer one wrote. Each
// script appends "writer token" to a log list and sets a state key.
// Reading them afterwards: exactly the writers told "ok" are in the log,
// whose tokens never go down, the state is the last of them, and every
// writer told "stale" left nothing.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	ctx := context.Background()
	const resource = "shard/7"
	log, state := r.key(resource, "log"), r.key(resource, "state")
	s := r.f.Script(`
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
`)
	write := func(w int, tok uint64) error {
		_, err := s.Run(ctx, fence.Grant(resource, tok), []string{log, state}, fencetest.Entry{Writer: w, Token: tok}.String())
		return err
	}
	res := fencetest.Waves{Waves: 6, PerWave: 10, Newer: 40}.Run(t, write)
	entries := r.rdb.LRange(ctx, log, 0, -1).Val()
	last := res.CheckLog(t, fencetest.ParseLog(t, entries), true)
	res.CheckStale(t)
	if st := r.rdb.Get(ctx, state).Val(); st != last.String() {
		t.Fatalf("state = %q, want the last entry %q", st, last)
	}
	if h, _ := r.f.Highest(ctx, resource); h != last.Token {
		t.Fatalf("fence = %d, want %d", h, last.Token)
	}
}
