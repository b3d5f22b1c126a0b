package fencetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence"
)

// TxLog is a guard that fences the transactions of a SQL database, with
// a table log of (writer, token) rows, as pgfence's and mysqlfence's
// tests have it.
type TxLog struct {
	// InTx runs body in a transaction fenced with l; body's log inserts
	// a row (writer, l's token) in log in that transaction.
	InTx func(ctx context.Context, l fence.Lease, body func(log func(writer int) error) error) error
	// Highest is the guard's highest token accepted for resource.
	Highest func(ctx context.Context, resource string) (uint64, error)
	// Rows returns the rows of log in the order they were inserted.
	Rows func(tb testing.TB) []Entry
}

// Steps fences a run of transactions on resource "jobs/x", tokens going
// up, repeated and going down. It fails t unless each with a token not
// lower than the highest accepted logs its row, each other is refused
// with a *fence.StaleError naming the highest, without running its body,
// and the guard's highest is the last accepted token.
func (g TxLog) Steps(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	steps := []struct {
		token   uint64
		stale   bool
		highest uint64
	}{{5, false, 5}, {5, false, 5}, {7, false, 7}, {6, true, 7}, {2, true, 7}, {7, false, 7}, {9, false, 9}}
	var want []Entry
	for i, s := range steps {
		ran := false
		err := g.InTx(ctx, fence.Grant("jobs/x", s.token), func(log func(int) error) error {
			ran = true
			return log(i)
		})
		if s.stale {
			se, ok := errors.AsType[*fence.StaleError](err)
			if !ok || !errors.Is(err, fence.ErrStale) || se.Token != s.token || se.Highest != s.highest || se.Resource != "jobs/x" {
				t.Fatalf("step %d: InTx with token %d = %v; want a StaleError with highest %d", i, s.token, err, s.highest)
			}
			if ran {
				t.Fatalf("step %d: fn ran after a stale fence", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: InTx with token %d: %v", i, s.token, err)
		}
		want = append(want, Entry{i, s.token})
	}
	if got := g.Rows(t); !slices.Equal(got, want) {
		t.Fatalf("log = %s, want %s", entries(got), entries(want))
	}
	if h, err := g.Highest(ctx, "jobs/x"); err != nil || h != 9 {
		t.Fatalf("Highest = %d, %v; want 9", h, err)
	}
}

// RollsBack fences a transaction whose body fails after writing: it
// fails t unless InTx returns the body's error, the fence stays where
// it was and the row is gone.
func (g TxLog) RollsBack(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := g.InTx(ctx, fence.Grant("r", 3), func(log func(int) error) error { return log(1) }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := g.InTx(ctx, fence.Grant("r", 8), func(log func(int) error) error {
		if err := log(2); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	if h, _ := g.Highest(ctx, "r"); h != 3 {
		t.Fatalf("a rolled-back transaction raised the fence to %d", h)
	}
	if got := g.Rows(t); len(got) != 1 {
		t.Fatalf("log = %v, want only the first write", got)
	}
}

// entries returns es as "(writer token) ...".
func entries(es []Entry) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = "(" + e.String() + ")"
	}
	return strings.Join(s, " ")
}

// CheckWaves checks the log after the writers of res (see Waves.Run),
// each of which logged a row as it wrote: it fails t unless the rows
// are those of the writers told ok (Result.CheckLog, complete), each
// writer told stale was refused behind a token told ok
// (Result.CheckStale), and the guard's highest for resource is the last
// token logged. It returns the last row.
func (g TxLog) CheckWaves(t testing.TB, res *Result, resource string) Entry {
	t.Helper()
	last := res.CheckLog(t, g.Rows(t), true)
	res.CheckStale(t)
	if h, err := g.Highest(context.Background(), resource); err != nil || h != last.Token {
		t.Fatalf("fence = %d, %v; want the last committed token %d", h, err, last.Token)
	}
	return last
}

// Refuses fails t unless InTx refuses the lease l, bad input, with an
// error matching want and fence.ErrInvalid, without running its body.
func (g TxLog) Refuses(t testing.TB, l fence.Lease, want error) {
	t.Helper()
	ran := false
	err := g.InTx(context.Background(), l, func(func(int) error) error { ran = true; return nil })
	if !errors.Is(err, want) || !errors.Is(err, fence.ErrInvalid) || ran {
		t.Fatalf("InTx = %v (fn ran: %t); want %v", err, ran, want)
	}
}
