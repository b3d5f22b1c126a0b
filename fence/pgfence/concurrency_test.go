package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/pgfence"
)

// outcome is what InTx returned to one writer.
type outcome struct {
	writer int
	token  uint64
	err    error
}

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

			write := func(writer int, token uint64) outcome {
				err := f.InTx(ctx, fence.Grant(resource, token), func(ctx context.Context, tx pgx.Tx) error {
					if err := logWrite(writer, token)(ctx, tx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE state SET writer = $1, token = $2 WHERE id = 1", writer, int64(token))
					return err
				})
				return outcome{writer, token, err}
			}

			// Writers go in waves; tokens grow from wave to wave and are
			// mixed within one. The writer with token 30 runs with the
			// last wave; the paused writer with token 3 is released once
			// token 30 committed.
			const waves, perWave = 5, 6
			const writers = waves * perWave
			const newer, paused = writers, writers + 1
			results := make(chan outcome, writers+2)
			var wg sync.WaitGroup
			start := startWaves(&wg, waves, perWave, func(i int) {
				results <- write(i, uint64((i/perWave)*5+1+(i*7)%5))
			})
			newerDone := make(chan struct{})
			wg.Go(func() { <-newerDone; results <- write(paused, 3) })
			wg.Go(func() {
				<-start[waves-1]
				o := write(newer, 30)
				close(newerDone)
				results <- o
			})
			wg.Wait()
			close(results)

			ok := map[int]uint64{}
			stale := map[int]*fence.StaleError{}
			for o := range results {
				switch se, isStale := errors.AsType[*fence.StaleError](o.err); {
				case o.err == nil:
					ok[o.writer] = o.token
				case isStale:
					stale[o.writer] = se
				default:
					t.Fatalf("writer %d (token %d): %v", o.writer, o.token, o.err)
				}
			}
			if se := stale[paused]; se == nil || se.Highest < 30 {
				t.Fatalf("the paused writer with token 3 = %v; want stale behind token 30 or higher", stale[paused])
			}
			if _, in := ok[newer]; !in {
				t.Fatalf("the writer with token 30 was refused: %v", stale[newer])
			}

			log := rows(t, d)
			seen := map[int]bool{}
			var last int64
			committed := map[uint64]bool{}
			for i, r := range log {
				w, tok := int(r[0]), r[1]
				if seen[w] {
					t.Fatalf("writer %d left two rows", w)
				}
				seen[w] = true
				if want, in := ok[w]; !in || int64(want) != tok {
					t.Fatalf("row %d: writer %d token %d, which was not told ok with that token (stale: %v)", i, w, tok, stale[w])
				}
				if tok < last {
					t.Fatalf("row %d: token %d committed after token %d: %v", i, tok, last, log)
				}
				last = tok
				committed[uint64(tok)] = true
			}
			if len(log) != len(ok) {
				t.Fatalf("%d rows for %d writers told ok", len(log), len(ok))
			}
			for w, se := range stale {
				if se.Highest <= se.Token || !committed[se.Highest] {
					t.Fatalf("writer %d refused with token %d behind %d, which no committed write had", w, se.Token, se.Highest)
				}
			}
			var sw, st int64
			if err := d.pool.QueryRow(ctx, "SELECT writer, token FROM state WHERE id = 1").Scan(&sw, &st); err != nil {
				t.Fatal(err)
			}
			lastRow := log[len(log)-1]
			if sw != lastRow[0] || st != lastRow[1] {
				t.Fatalf("state = writer %d token %d; want the last commit %v", sw, st, lastRow)
			}
			if h, _ := f.Highest(ctx, resource); int64(h) != last {
				t.Fatalf("fence = %d, want the last committed token %d", h, last)
			}
			t.Logf("%s: %d writers committed, %d refused as stale; final token %d", iso, len(ok), len(stale), last)
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
			d := newDB(t)
			f := d.install(t, pgfence.DefaultConfig())
			d.exec(t, logTable)
			ctx := context.Background()
			// The second writer's connections have an application name
			// of their own, to see them wait.
			app := d.schema + "_second"
			second := newPool(t, d.schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
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
