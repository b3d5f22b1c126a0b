package pgfence_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// TestReadModifyWrite plays the lost update of docs/fencing.md. A (token
// 1) has written; its lease expired and B (token 2) does a
// read-modify-write: it reads the list of writers, appends itself and
// writes the list back. Between B's read and B's write, A wakes up and
// appends itself too (its own read-modify-write, with token 1).
//
// With ReadModifyWrite, A's write waits for B's fence row and is refused
// once B has committed: the list holds A's first write and B's. With the
// read outside the fenced transaction (the bug it prevents, run here to
// show the test catches it), A's write passes the fence, B had not
// raised it yet, and B's write then replaces the list with one computed
// from before A's write: A was told ok and its write is gone.
func TestReadModifyWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fenced   bool
		wantLost bool
	}{
		{"ReadModifyWrite", true, false},
		{"read outside the fence (the bug)", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, f := newLogDB(t)
			ctx := context.Background()
			d.exec(t, "CREATE TABLE writers (id int PRIMARY KEY, list text NOT NULL)")
			d.exec(t, "INSERT INTO writers VALUES (1, '')")
			// A's connections have an application name of their own, to
			// see them wait.
			app := d.schema + "_late"
			latePool := storetest.Pool(t, d.schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
			fa, err := pgfence.New(ctx, latePool, pgfence.Config{Schema: d.schema})
			if err != nil {
				t.Fatal(err)
			}
			read := func(ctx context.Context, tx pgx.Tx) (string, error) {
				var list string
				err := tx.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list)
				return list, err
			}
			appendAs := func(who string) func(context.Context, pgx.Tx, string) error {
				return func(ctx context.Context, tx pgx.Tx, list string) error {
					_, err := tx.Exec(ctx, "UPDATE writers SET list = $1 WHERE id = 1", list+who+";")
					return err
				}
			}
			a, b := fence.Grant("reports", 1), fence.Grant("reports", 2)
			if err := pgfence.ReadModifyWrite(ctx, fa, a, read, appendAs("A1")); err != nil {
				t.Fatal(err)
			}
			var lateErr func() error
			late := func() {
				lateErr = fencetest.StartLate(t, func() error { return pgfence.ReadModifyWrite(ctx, fa, a, read, appendAs("A2")) },
					func() bool { return lockWaiting(t, d, app) })
			}
			if tc.fenced {
				err = pgfence.ReadModifyWrite(ctx, f, b, func(ctx context.Context, tx pgx.Tx) (string, error) {
					list, err := read(ctx, tx)
					late() // A wakes up between B's read and B's write
					return list, err
				}, appendAs("B"))
			} else {
				// B reads in a transaction of its own, unfenced.
				var list string
				if err = d.pool.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list); err == nil {
					late()
					err = f.InTx(ctx, b, func(ctx context.Context, tx pgx.Tx) error { return appendAs("B")(ctx, tx, list) })
				}
			}
			if err != nil {
				t.Fatalf("B: %v", err)
			}
			aErr := lateErr()
			var list string
			if err := d.pool.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list); err != nil {
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

// lockWaiting reports whether a backend with application name app waits
// for a lock.
func lockWaiting(t *testing.T, d *testDB, app string) bool {
	t.Helper()
	var n int
	err := d.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestReadModifyWriteRepeatableRead: under REPEATABLE READ the snapshot
// is taken at the fence, before it waits. A (token 1, the highest
// already) holds the fence row; B (token 2) waits for it in
// ReadModifyWrite; A appends itself and commits. B's read then comes
// from a snapshot older than A's commit, and B's write to the same row
// fails with a serialization failure, which ReadModifyWrite runs again:
// the second run reads A's write, and nothing is lost.
func TestReadModifyWriteRepeatableRead(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	cfg := pgfence.DefaultConfig()
	cfg.IsoLevel = pgx.RepeatableRead
	f := d.install(t, cfg)
	ctx := context.Background()
	d.exec(t, "CREATE TABLE writers (id int PRIMARY KEY, list text NOT NULL)")
	d.exec(t, "INSERT INTO writers VALUES (1, 'A1;')")
	app := d.schema + "_b"
	bPool := storetest.Pool(t, d.schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
	cfg.Schema = d.schema
	fb, err := pgfence.New(ctx, bPool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Advance(ctx, "reports", 1); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		aErr <- f.InTx(ctx, fence.Grant("reports", 1), func(ctx context.Context, tx pgx.Tx) error {
			close(inside)
			<-release // paused while holding the fence row
			_, err := tx.Exec(ctx, "UPDATE writers SET list = list || 'A2;' WHERE id = 1")
			return err
		})
	}()
	<-inside
	runs := 0
	bErr := make(chan error, 1)
	go func() {
		bErr <- pgfence.ReadModifyWrite(ctx, fb, fence.Grant("reports", 2),
			func(ctx context.Context, tx pgx.Tx) (string, error) {
				runs++
				var list string
				err := tx.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list)
				return list, err
			},
			func(ctx context.Context, tx pgx.Tx, list string) error {
				_, err := tx.Exec(ctx, "UPDATE writers SET list = $1 WHERE id = 1", list+"B;")
				return err
			})
	}()
	waitForLockWait(t, d, app)
	close(release)
	if err := <-aErr; err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := <-bErr; err != nil {
		t.Fatalf("B: %v", err)
	}
	var list string
	if err := d.pool.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list); err != nil {
		t.Fatal(err)
	}
	if list != "A1;A2;B;" {
		t.Fatalf("list = %q after %d runs of B; want A1;A2;B;", list, runs)
	}
	// The first run read the snapshot from before A's commit and failed
	// to write; the second read A's write.
	if runs != 2 {
		t.Fatalf("B ran %d times; want 2 (a serialization failure, then a run that reads A's write)", runs)
	}
}
