package mysqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/mysqlfence"
)

// TestConcurrentWriters runs many fenced writers with mixed tokens on one
// resource, under each isolation level, with one stale writer held back
// until a newer one committed. Reading the table afterwards: exactly the
// writers told "ok" left a row, in commit order their tokens never go
// down (each committed while its token was the highest accepted), and
// every writer told "stale" left nothing. Each writer also increments a
// counter it read with a plain (non-locking) read after the fence: the
// counter ends equal to the number of writers told ok, so no write was
// lost to a read from before the previous writer's commit.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	for _, iso := range []sql.IsolationLevel{sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(iso.String(), func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			d.db.SetMaxOpenConns(12)
			cfg := mysqlfence.DefaultConfig()
			cfg.Isolation = iso
			f := d.install(t, cfg)
			d.exec(t, logTable)
			d.exec(t, "CREATE TABLE state (id INT PRIMARY KEY, writer BIGINT NOT NULL, token BIGINT UNSIGNED NOT NULL, n INT NOT NULL) ENGINE=InnoDB")
			d.exec(t, "INSERT INTO state VALUES (1, -1, 0, 0)")
			ctx := context.Background()
			const resource = "shard/7"

			write := func(writer int, token uint64) error {
				return f.InTx(ctx, fence.Grant(resource, token), func(ctx context.Context, tx *sql.Tx) error {
					if err := logWrite(writer, token)(ctx, tx); err != nil {
						return err
					}
					var n int
					if err := tx.QueryRowContext(ctx, "SELECT n FROM state WHERE id = 1").Scan(&n); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, "UPDATE state SET writer = ?, token = ?, n = ? WHERE id = 1", writer, token, n+1)
					return err
				})
			}
			res := fencetest.Waves{Waves: 5, PerWave: 6, Newer: 30}.Run(t, write)

			last := d.txLog(f).CheckWaves(t, res, resource)
			var sw int64
			var st uint64
			var n int
			if err := d.db.QueryRow("SELECT writer, token, n FROM state WHERE id = 1").Scan(&sw, &st, &n); err != nil {
				t.Fatal(err)
			}
			if sw != int64(last.Writer) || st != last.Token {
				t.Fatalf("state = writer %d token %d; want the last commit %v", sw, st, last)
			}
			if n != len(res.OK) {
				t.Fatalf("counter = %d after %d writers told ok: increments were lost", n, len(res.OK))
			}
		})
	}
}

// TestFirstFences has many transactions fence new resources at once.
// The first fence of a resource inserts its row, and InnoDB takes gap
// locks around new rows while it checks for duplicates. A transaction
// that fences one resource waits only in its first statement, holding
// nothing yet, so it is never a deadlock victim: run without retries,
// none may fail. Transactions that fence several new resources each (in
// ascending order) can deadlock on those gap locks; InTx runs them again
// (Config.Retries), and none may fail either.
func TestFirstFences(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		each    int // resources fenced by each transaction
		retries int
	}{
		{"one each, no retries", 1, 0},
		{"several each, retried", 4, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			d.db.SetMaxOpenConns(32)
			cfg := mysqlfence.DefaultConfig()
			cfg.Retries = tc.retries
			f := d.install(t, cfg)
			ctx := context.Background()
			const writers = 32
			errs := make(chan error, writers)
			for w := range writers {
				go func() {
					// Two writers per resource, with tokens in both orders.
					first := w % (writers / 2)
					errs <- f.InTx(ctx, fence.Grant(fmt.Sprintf("r/%02d", first), uint64(w+1)), func(ctx context.Context, tx *sql.Tx) error {
						for k := first + 1; k < first+tc.each; k++ {
							if err := f.Check(ctx, tx, fence.Grant(fmt.Sprintf("r/%02d", k), uint64(100+w))); err != nil {
								return err
							}
						}
						return nil
					})
				}()
			}
			stale := 0
			for range writers {
				switch err := <-errs; {
				case errors.Is(err, fence.ErrStale):
					stale++
				case err != nil:
					t.Fatalf("a fenced transaction failed: %v", err)
				}
			}
			t.Logf("%d of %d transactions refused as stale", stale, writers)
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
		name          string
		first, second uint64
		secondStale   bool
		wantLog       string
	}{
		{"newer waits, then commits", 5, 6, false, "[[1 5] [2 6]]"},
		{"older waits, then is stale", 6, 5, true, "[[1 6]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, f := newLogDB(t)
			ctx := context.Background()
			inside, release := make(chan struct{}), make(chan struct{})
			firstErr := make(chan error, 1)
			go func() {
				firstErr <- f.InTx(ctx, fence.Grant("r", tc.first), func(ctx context.Context, tx *sql.Tx) error {
					if err := logWrite(1, tc.first)(ctx, tx); err != nil {
						return err
					}
					close(inside)
					<-release // paused while holding the fence
					return nil
				})
			}()
			<-inside
			wait := fencetest.StartLate(t, func() error { return f.InTx(ctx, fence.Grant("r", tc.second), logWrite(2, tc.second)) },
				func() bool { return lockWaits(t, d) > 0 })
			if lockWaits(t, d) == 0 {
				t.Fatalf("the second writer finished (%v) while the first held the fence", wait())
			}
			close(release)
			if err := <-firstErr; err != nil {
				t.Fatalf("first writer: %v", err)
			}
			err := wait()
			if got := errors.Is(err, fence.ErrStale); got != tc.secondStale || (!tc.secondStale && err != nil) {
				t.Fatalf("second writer: %v; want stale %t", err, tc.secondStale)
			}
			if got := fmt.Sprint(rows(t, d)); got != tc.wantLog {
				t.Fatalf("log = %s, want %s", got, tc.wantLog)
			}
		})
	}
}

// lockWaits returns how many transactions on d's database wait for a
// row lock. It reads SHOW ENGINE INNODB STATUS: MariaDB's
// information_schema.INNODB_TRX is a cache that is not refreshed while
// something reads it more often than every 100ms, as tests polling in
// parallel do.
func lockWaits(tb testing.TB, d *testDB) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ours := map[string]bool{}
	r, err := d.db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?", d.name)
	if err != nil {
		tb.Fatal(err)
	}
	for r.Next() {
		var id string
		if err := r.Scan(&id); err != nil {
			tb.Fatal(err)
		}
		ours[id] = true
	}
	r.Close()
	var typ, name, status string
	if err := d.db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, trx := range strings.Split(status, "\n---TRANSACTION ")[1:] {
		if !strings.Contains(trx, "\nLOCK WAIT ") {
			continue
		}
		if m := threadID.FindStringSubmatch(trx); m != nil && ours[m[1]] {
			n++
		}
	}
	return n
}

var threadID = regexp.MustCompile(`(?:MariaDB|MySQL) thread id (\d+)`)
