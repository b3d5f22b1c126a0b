package pgfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// TestReadModifyWrite plays the lost update of docs/fencing.md (see
// fencetest.ReadModifyWrite) on a row of a table: ReadModifyWrite is the
// fenced read-modify-write, where A's late write waits for B's fence row
// and is refused once B has committed; a read in a transaction of its
// own, outside the fence, is the bug it prevents.
func TestReadModifyWrite(t *testing.T) {
	t.Parallel()
	fencetest.ReadModifyWrite(t, func(t *testing.T) fencetest.RMW {
		d, _ := newLogDB(t)
		d.exec(t, "CREATE TABLE writers (id int PRIMARY KEY, list text NOT NULL)")
		d.exec(t, "INSERT INTO writers VALUES (1, '')")
		// The fenced writes go through connections with an application
		// name of their own, to see A's late write wait for B's fence
		// row (B never waits: it holds the row).
		app := d.schema + "_late"
		pool := storetest.Pool(t, d.schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
		f, err := pgfence.New(context.Background(), pool, pgfence.Config{Schema: d.schema})
		if err != nil {
			t.Fatal(err)
		}
		read := func(ctx context.Context, tx pgx.Tx) (string, error) {
			var list string
			err := tx.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list)
			return list, err
		}
		write := func(ctx context.Context, tx pgx.Tx, list string) error {
			_, err := tx.Exec(ctx, "UPDATE writers SET list = $1 WHERE id = 1", list)
			return err
		}
		return fencetest.RMW{
			Write: func(ctx context.Context, l fence.Lease, list string) error {
				return f.InTx(ctx, l, func(ctx context.Context, tx pgx.Tx) error { return write(ctx, tx, list) })
			},
			Read: func(ctx context.Context) (string, error) {
				var list string
				err := d.pool.QueryRow(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list)
				return list, err
			},
			Update: func(ctx context.Context, l fence.Lease, modify func(string) string) error {
				// modify runs in read, right after B's read, where A
				// wakes up.
				return pgfence.ReadModifyWrite(ctx, f, l, func(ctx context.Context, tx pgx.Tx) (string, error) {
					old, err := read(ctx, tx)
					if err != nil {
						return "", err
					}
					return modify(old), nil
				}, write)
			},
			Blocked: func() bool { return lockWaiting(t, d, app) },
		}
	})
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
