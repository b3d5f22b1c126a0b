package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// TestConcurrentWriters runs many fenced writers with mixed tokens on one
// resource, under each isolation level, with one stale writer held back
// until a newer one committed. Reading the table afterwards: exactly the
// writers told "ok" left a row, in commit order their tokens never go
// down (each committed while its token was the highest accepted), and
// every writer told "stale" left nothing.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			d := newDB(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
			cfg := pgfence.DefaultConfig()
			cfg.IsoLevel = iso
			// Every waiter on the fence row fails once per commit ahead
			// of it under repeatable read and serializable: allow enough
			// runs for the whole crowd.
			cfg.Retries = 200
			f := d.install(t, cfg)
			d.exec(t, logTable)
			d.exec(t, "CREATE TABLE state (id int PRIMARY KEY, writer bigint NOT NULL, token bigint NOT NULL)")
			d.exec(t, "INSERT INTO state VALUES (1, -1, 0)")
			ctx := context.Background()
			const resource = "shard/7"

			write := func(writer int, token uint64) error {
				return f.InTx(ctx, fence.Grant(resource, token), func(ctx context.Context, tx pgx.Tx) error {
					if err := logWrite(writer, token)(ctx, tx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE state SET writer = $1, token = $2 WHERE id = 1", writer, int64(token))
					return err
				})
			}
			res := fencetest.Waves{Waves: 5, PerWave: 6, Newer: 30}.Run(t, write)

			last := d.txLog(f).CheckWaves(t, res, resource)
			var sw, st int64
			if err := d.pool.QueryRow(ctx, "SELECT writer, token FROM state WHERE id = 1").Scan(&sw, &st); err != nil {
				t.Fatal(err)
			}
			if sw != int64(last.Writer) || st != int64(last.Token) {
				t.Fatalf("state = writer %d token %d; want the last commit %v", sw, st, last)
			}
		})
	}
}

// TestRowLockSerialises holds a fenced transaction open (its writer paused
// inside it) while another writer fences the same resource: the second
// waits for the first to end. A newer token then commits after it; an
// older one is refused once the first commits, and leaves nothing.
func TestRowLockSerialises(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		first, second      uint64
		secondStale        bool
		wantLog            string
		wantHighestAtFinal uint64
	}{
		{"newer waits, then commits", 5, 6, false, "[[1 5] [2 6]]", 6},
		{"older waits, then is stale", 6, 5, true, "[[1 6]]", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, f := newLogDB(t)
			ctx := context.Background()
			// The second writer's connections have an application name
			// of their own, to see them wait.
			app := d.schema + "_second"
			second := storetest.Pool(t, d.schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
			f2, err := pgfence.New(ctx, second, pgfence.Config{Schema: d.schema})
			if err != nil {
				t.Fatal(err)
			}

			inside, release := make(chan struct{}), make(chan struct{})
			firstErr := make(chan error, 1)
			go func() {
				firstErr <- f.InTx(ctx, fence.Grant("r", tc.first), func(ctx context.Context, tx pgx.Tx) error {
					if err := logWrite(1, tc.first)(ctx, tx); err != nil {
						return err
					}
					close(inside)
					<-release // paused while holding the fence
					return nil
				})
			}()
			<-inside
			secondErr := make(chan error, 1)
			go func() { secondErr <- f2.InTx(ctx, fence.Grant("r", tc.second), logWrite(2, tc.second)) }()
			waitForLockWait(t, d, app)
			close(release)
			if err := <-firstErr; err != nil {
				t.Fatalf("first writer: %v", err)
			}
			err = <-secondErr
			if got := errors.Is(err, fence.ErrStale); got != tc.secondStale || (!tc.secondStale && err != nil) {
				t.Fatalf("second writer: %v; want stale %t", err, tc.secondStale)
			}
			if got := fmt.Sprint(rows(t, d)); got != tc.wantLog {
				t.Fatalf("log = %s, want %s", got, tc.wantLog)
			}
		})
	}
}

// waitForLockWait polls until a backend with application name app waits
// for a lock, failing t after 10s.
func waitForLockWait(t *testing.T, d *testDB, app string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := d.pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the second writer never waited for the fence row's lock within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
