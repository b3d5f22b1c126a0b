// Package fencetest holds what the tests of the storage guards share: a
// crowd of concurrent writers with mixed tokens, and the checks of what
// they were told and of what the store kept (Waves); the lost update of
// docs/fencing.md, played on any guard through a small adapter
// (ReadModifyWrite); and the checks that the SQL guards' InTx share
// (TxLog). It is test support: only _test.go files import it.
package fencetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/fence"
)

// WantStale fails t unless err is a *fence.StaleError, also matching
// fence.ErrStale, for token behind highest.
func WantStale(t testing.TB, err error, token, highest uint64) {
	t.Helper()
	se, ok := errors.AsType[*fence.StaleError](err)
	if !ok || !errors.Is(err, fence.ErrStale) || se.Token != token || se.Highest != highest {
		t.Fatalf("err = %v; want a StaleError for token %d behind %d", err, token, highest)
	}
}

// Waves is a crowd of writers on one resource. They go in waves: wave k
// starts when wave k-1 has finished. Tokens grow from wave to wave and
// are mixed within one: writer i, from 0, has token
// (i/PerWave)*5+1+(i*7)%5. A newer writer, with token Newer (above every
// wave's), runs with the last wave; a paused writer, with token
// PausedToken, is released once the newer one was told ok.
type Waves struct {
	Waves, PerWave int
	Newer          uint64
}

// PausedToken is the token of the paused writer.
const PausedToken = 3

// Result is what the writers of Waves were told.
type Result struct {
	// OK holds the token of each writer told ok.
	OK map[int]uint64
	// Stale holds the refusal of each writer refused as stale.
	Stale map[int]*fence.StaleError
	// Newer and Paused are the numbers of the newer and the paused
	// writer; the others are numbered from 0.
	Newer, Paused int
}

// Run has each writer call write once, with its number and token. It
// fails t unless each was told ok (nil) or stale (a *fence.StaleError),
// the newer writer was told ok, and the paused one stale behind Newer or
// higher.
func (w Waves) Run(t testing.TB, write func(writer int, token uint64) error) *Result {
	t.Helper()
	type outcome struct {
		writer int
		token  uint64
		err    error
	}
	call := func(writer int, token uint64) outcome { return outcome{writer, token, write(writer, token)} }
	writers := w.Waves * w.PerWave
	r := &Result{OK: map[int]uint64{}, Stale: map[int]*fence.StaleError{}, Newer: writers, Paused: writers + 1}
	results := make(chan outcome, writers+2)
	var wg sync.WaitGroup
	start := startWaves(&wg, w.Waves, w.PerWave, func(i int) {
		results <- call(i, uint64((i/w.PerWave)*5+1+(i*7)%5))
	})
	newerDone := make(chan struct{})
	wg.Go(func() { <-newerDone; results <- call(r.Paused, PausedToken) })
	wg.Go(func() {
		<-start[w.Waves-1]
		o := call(r.Newer, w.Newer)
		close(newerDone)
		results <- o
	})
	wg.Wait()
	close(results)

	for o := range results {
		switch se, isStale := errors.AsType[*fence.StaleError](o.err); {
		case o.err == nil:
			r.OK[o.writer] = o.token
		case isStale && errors.Is(o.err, fence.ErrStale):
			r.Stale[o.writer] = se
		default:
			t.Fatalf("writer %d (token %d): %v", o.writer, o.token, o.err)
		}
	}
	if se := r.Stale[r.Paused]; se == nil || se.Highest < w.Newer {
		t.Fatalf("the paused writer with token %d: %v; want stale behind token %d or higher", PausedToken, r.Stale[r.Paused], w.Newer)
	}
	if _, in := r.OK[r.Newer]; !in {
		t.Fatalf("the writer with token %d was refused: %v", w.Newer, r.Stale[r.Newer])
	}
	t.Logf("%d writers told ok, %d refused as stale", len(r.OK), len(r.Stale))
	return r
}

// CheckStale fails t unless every writer told stale was refused behind
// a higher token that a writer was told ok with: for guards that record
// a token only with the write it lets through.
func (r *Result) CheckStale(t testing.TB) {
	t.Helper()
	accepted := map[uint64]bool{}
	for _, tok := range r.OK {
		accepted[tok] = true
	}
	for w, se := range r.Stale {
		if se.Highest <= se.Token || !accepted[se.Highest] {
			t.Fatalf("writer %d refused with token %d behind %d, which no writer told ok had", w, se.Token, se.Highest)
		}
	}
}

// Entry is a write the store kept: its writer and token.
type Entry struct {
	Writer int
	Token  uint64
}

// String returns e as "writer token", as ParseLog reads it.
func (e Entry) String() string { return fmt.Sprintf("%d %d", e.Writer, e.Token) }

// ParseLog reads entries written as "writer token", failing t on any
// other text.
func ParseLog(t testing.TB, log []string) []Entry {
	t.Helper()
	out := make([]Entry, len(log))
	for i, s := range log {
		e := &out[i]
		if _, err := fmt.Sscanf(s, "%d %d", &e.Writer, &e.Token); err != nil || e.String() != s {
			t.Fatalf("entry %d is %q, not \"writer token\"", i, s)
		}
	}
	return out
}

// CheckLog fails t unless every entry of log, in the order the store
// kept them, is from a writer told ok with that token, no writer stands
// twice, and the tokens never go down; and, when complete, unless every
// writer told ok stands in log. It returns the last entry, the zero
// Entry for none.
func (r *Result) CheckLog(t testing.TB, log []Entry, complete bool) Entry {
	t.Helper()
	seen := map[int]bool{}
	var last Entry
	for i, e := range log {
		if seen[e.Writer] {
			t.Fatalf("entry %d: writer %d stands twice: %v", i, e.Writer, log)
		}
		seen[e.Writer] = true
		if tok, in := r.OK[e.Writer]; !in || tok != e.Token {
			t.Fatalf("entry %d: writer %d with token %d, which was not told ok with that token (stale: %v)", i, e.Writer, e.Token, r.Stale[e.Writer])
		}
		if e.Token < last.Token {
			t.Fatalf("entry %d: token %d after token %d: %v", i, e.Token, last.Token, log)
		}
		last = e
	}
	if complete && len(log) != len(r.OK) {
		t.Fatalf("%d entries for %d writers told ok", len(log), len(r.OK))
	}
	return last
}

// startWaves runs waves of perWave calls of fn(i), i counting from 0, on
// wg: wave k starts when wave k-1 has finished. It returns a channel per
// wave, closed when the wave starts.
func startWaves(wg *sync.WaitGroup, waves, perWave int, fn func(i int)) []chan struct{} {
	start := make([]chan struct{}, waves+1)
	for k := range start {
		start[k] = make(chan struct{})
	}
	for k := range waves {
		var wave sync.WaitGroup
		for j := range perWave {
			wave.Add(1)
			wg.Go(func() {
				defer wave.Done()
				<-start[k]
				fn(k*perWave + j)
			})
		}
		wg.Go(func() { <-start[k]; wave.Wait(); close(start[k+1]) })
	}
	close(start[0])
	return start[:waves]
}

// StartLate runs late, a late holder's write, in a goroutine of its own,
// and returns once it has finished or blocked reports that it waits (for
// a lock the store holds for another writer), failing t if neither
// happens within 10s. The function it returns waits for late's error.
func StartLate(t testing.TB, late func() error, blocked func() bool) (wait func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- late() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			return func() error { return err }
		default:
		}
		if blocked() {
			return func() error { return <-done }
		}
		if time.Now().After(deadline) {
			t.Fatal("the late write neither finished nor waited for a lock within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
