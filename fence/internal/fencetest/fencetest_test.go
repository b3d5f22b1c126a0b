package fencetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/fence"
)

// recorder is a testing.TB whose Fatalf records the failure and ends the
// goroutine, as testing's does.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs check with a recorder and returns how it failed, "" if
// it did not.
func failure(t *testing.T, check func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); check(r) }()
	<-done
	return r.failure
}

// guard is a fence in memory; with broken set it lets every token in.
type guard struct {
	mu      sync.Mutex
	highest uint64
	log     []Entry
	broken  bool
}

func (g *guard) write(writer int, token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if token < g.highest && !g.broken {
		return &fence.StaleError{Resource: "r", Token: token, Highest: g.highest}
	}
	g.highest = max(g.highest, token)
	g.log = append(g.log, Entry{writer, token})
	return nil
}

func TestChecks(t *testing.T) {
	waves := Waves{Waves: 3, PerWave: 4, Newer: 20}
	var g guard
	var res *Result
	if f := failure(t, func(tb testing.TB) {
		res = waves.Run(tb, g.write)
		res.CheckLog(tb, g.log, true)
		res.CheckStale(tb)
		WantStale(tb, res.Stale[res.Paused], PausedToken, 20)
	}); f != "" {
		t.Fatalf("a sound guard failed: %s", f)
	}
	newer := Entry{res.Newer, 20}
	for name, check := range map[string]func(tb testing.TB){
		"paused writer let in": func(tb testing.TB) { waves.Run(tb, (&guard{broken: true}).write) },
		"other error":          func(tb testing.TB) { waves.Run(tb, func(int, uint64) error { return errors.New("boom") }) },
		"token goes down":      func(tb testing.TB) { res.CheckLog(tb, []Entry{newer, g.log[0]}, false) },
		"writer not told ok":   func(tb testing.TB) { res.CheckLog(tb, []Entry{{res.Paused, PausedToken}}, false) },
		"wrong token":          func(tb testing.TB) { res.CheckLog(tb, []Entry{{res.Newer, 19}}, false) },
		"writer twice":         func(tb testing.TB) { res.CheckLog(tb, []Entry{newer, newer}, false) },
		"writer missing":       func(tb testing.TB) { res.CheckLog(tb, g.log[1:], true) },
		"torn entry":           func(tb testing.TB) { ParseLog(tb, []string{"1 2", "torn: 1 2"}) },
		"behind no write": func(tb testing.TB) {
			res.Stale[-5] = &fence.StaleError{Token: 1, Highest: 99}
			defer delete(res.Stale, -5)
			res.CheckStale(tb)
		},
		"not stale": func(tb testing.TB) { WantStale(tb, errors.New("boom"), 1, 2) },
	} {
		if f := failure(t, check); f == "" {
			t.Errorf("%s: the check passed", name)
		} else {
			t.Logf("%s: %s", name, f)
		}
	}
}

// list is a store of one list in memory behind a fence; with
// unfencedRead set, its fenced read records no token (the bug), and with
// fencedRead set, its unfenced read records one.
type list struct {
	mu                       sync.Mutex
	highest                  uint64
	value                    string
	unfencedRead, fencedRead bool
}

func (s *list) pass(l fence.Lease, record bool) error {
	if l.Token() < s.highest {
		return &fence.StaleError{Resource: l.Name(), Token: l.Token(), Highest: s.highest}
	}
	if record {
		s.highest = l.Token()
	}
	return nil
}

func (s *list) rmw() RMW {
	return RMW{
		Write: func(_ context.Context, l fence.Lease, v string) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err := s.pass(l, true); err != nil {
				return err
			}
			s.value = v
			return nil
		},
		Read: func(context.Context) (string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.fencedRead {
				s.highest = max(s.highest, 2)
			}
			return s.value, nil
		},
		FencedRead: func(_ context.Context, l fence.Lease) (string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.value, s.pass(l, !s.unfencedRead)
		},
	}
}

func TestReadModifyWriteChecks(t *testing.T) {
	for _, tc := range []struct {
		name        string
		store       *list
		fenced      bool
		wantFailure bool
	}{
		{"sound, fenced", &list{}, true, false},
		{"sound, unfenced", &list{}, false, false},
		{"fenced read records nothing", &list{unfencedRead: true}, true, true},
		{"unfenced read records a token", &list{fencedRead: true}, false, true},
	} {
		f := failure(t, func(tb testing.TB) { tc.store.rmw().play(tb, tc.fenced) })
		if (f != "") != tc.wantFailure {
			t.Errorf("%s: failure %q; want one %t", tc.name, f, tc.wantFailure)
		} else {
			t.Logf("%s: %q", tc.name, f)
		}
	}
}
