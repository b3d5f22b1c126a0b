package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/pgfence"
)

// storePostgres is the store spec of the Postgres scenario: a table
// written by transactions fenced by tenure_fence (in-process workers
// only).
const storePostgres = "postgres"

// pgDemo is the demo's place in a Postgres server: a schema of its own
// with the fence installed, a table of reports and a log of every
// committed write, dropped by close.
type pgDemo struct {
	url    string
	schema string // quoted
	name   string
	pool   *pgxpool.Pool
	fence  *pgfence.Fence
}

var _ store = (*pgDemo)(nil)

// openPostgres connects to url and prepares the demo's schema. An error
// means the Postgres scenarios cannot run (they are skipped).
func openPostgres(ctx context.Context, url string) (*pgDemo, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 8
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > PostgresTimeout {
		cfg.ConnConfig.ConnectTimeout = PostgresTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, PostgresTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, err
	}
	name := "tenure_demo_" + strings.ToLower(rand.Text()[:10])
	d := &pgDemo{url: url, name: name, schema: pgx.Identifier{name}.Sanitize(), pool: pool}
	if err := d.setUp(ctx); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *pgDemo) setUp(ctx context.Context) error {
	if _, err := pgfence.Install(ctx, d.pool, d.name); err != nil {
		return err
	}
	for _, sql := range []string{
		"CREATE TABLE " + d.schema + ".reports (key text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)",
		"CREATE TABLE " + d.schema + ".report_log (id bigserial PRIMARY KEY, key text NOT NULL, value text NOT NULL, token bigint NOT NULL)",
	} {
		if _, err := d.pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	f, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: d.name})
	if err != nil {
		return err
	}
	d.fence = f
	return nil
}

// close drops the demo's schema and closes the pool.
func (d *pgDemo) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+d.schema+" CASCADE")
	d.pool.Close()
}

// Put writes value under key in a transaction fenced by (leaseName,
// token): tenure_fence first, then the row and its log entry.
func (d *pgDemo) Put(ctx context.Context, key, value, leaseName string, token uint64) error {
	return d.fence.InTx(ctx, fence.Grant(leaseName, token), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+d.schema+".reports AS r (key, value, token) VALUES ($1, $2, $3) "+
			"ON CONFLICT (key) DO UPDATE SET value = excluded.value, token = excluded.token", key, value, int64(token))
		if err == nil {
			_, err = tx.Exec(ctx, "INSERT INTO "+d.schema+".report_log (key, value, token) VALUES ($1, $2, $3)", key, value, int64(token))
		}
		return err
	})
}

func (d *pgDemo) Get(ctx context.Context, key string) (string, uint64, error) {
	var v string
	var tok int64
	err := d.pool.QueryRow(ctx, "SELECT value, token FROM "+d.schema+".reports WHERE key = $1", key).Scan(&v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("demo: key %q has no value: %w", key, client.ErrNotFound)
	}
	return v, uint64(tok), err
}

func (*pgDemo) Fenced() bool { return true }

// describe and rejected word the workers' writes (describedStore).
func (*pgDemo) describe(key, value string) string {
	return fmt.Sprintf("tx: tenure_fence, then %s = %q", key, value)
}

func (*pgDemo) rejected() string { return "REJECTED: stale token, rolled back" }

// log returns the committed writes, in commit order, as "value (token)".
func (d *pgDemo) log(ctx context.Context) ([]string, error) {
	rows, err := d.pool.Query(ctx, "SELECT value, token FROM "+d.schema+".report_log ORDER BY id")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var v string
		var tok int64
		err := r.Scan(&v, &tok)
		return fmt.Sprintf("%s (token %d)", v, tok), err
	})
}

// runPostgres runs the Postgres scenario: the paused writer against the
// fenced table, then a look at every row committed.
func runPostgres(ctx context.Context, tl *timeline, cfg *Config, procs launcher, pg *pgDemo) (Result, error) {
	r, err := runPausedWriter(ctx, tl, cfg, Postgres, pausedEnv{launcher: procs, storeSpec: storePostgres, store: pg})
	if err != nil || !r.Passed {
		return r, err
	}
	rows, err := pg.log(ctx)
	if err != nil {
		return Result{Scenario: Postgres, Summary: fmt.Sprintf("reading the table's rows: %v", err)}, nil
	}
	e := Event{Actor: "check", Op: "read", Text: "rows committed: " + strings.Join(rows, ", "),
		Outcome: "none from A's late transaction", Tone: ToneGood}
	late := false
	for _, row := range rows {
		late = late || strings.HasPrefix(row, valueA2+" ")
	}
	if late {
		e.Outcome, e.Tone = "A's late transaction committed", ToneBad
		r.Passed, r.Summary = false, "A's late transaction left a row: "+strings.Join(rows, ", ")
	}
	tl.record(e)
	return r, nil
}

// runDBLock runs the DBLock scenario:
//
//	A  pg_advisory_lock on its connection, write "A-1", stall
//	B  pg_try_advisory_lock: held; waits in pg_advisory_lock
//	   (B still waits a TTL later: the lock holds while A's connection lives)
//	   A's connection drops: the server frees A's lock
//	B  granted the lock, writes "B-1", unlocks
//	A  wakes; its connection is gone; it writes "A-2" on a new one
//
// Expected: B waited until A's connection dropped, and A's late write,
// which no lock or token stopped, overwrote B's.
func runDBLock(ctx context.Context, tl *timeline, cfg *Config, pg *pgDemo) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Pause+cfg.TTL+30*time.Second)
	defer cancel()
	res := Result{Scenario: DBLock}
	fail := func(format string, args ...any) (Result, error) {
		res.Summary = fmt.Sprintf(format, args...)
		return res, nil
	}
	const lockKey = 7400 // the advisory lock's key
	// write writes value on conn, or through the pool when conn is nil.
	write := func(ctx context.Context, conn *pgx.Conn, value string) error {
		sql := "INSERT INTO " + pg.schema + ".reports (key, value, token) VALUES ($1, $2, 0) " +
			"ON CONFLICT (key) DO UPDATE SET value = excluded.value, token = 0"
		var err error
		if conn != nil {
			_, err = conn.Exec(ctx, sql, lockReportKey, value)
		} else {
			_, err = pg.pool.Exec(ctx, sql, lockReportKey, value)
		}
		return err
	}

	aConn, err := pg.pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer aConn.Release()
	var aPID int
	if err := aConn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&aPID); err != nil {
		return res, err
	}
	if _, err := aConn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return res, err
	}
	tl.record(Event{Actor: "A", Op: "acquire", Text: fmt.Sprintf("pg_advisory_lock(%d), connection pid %d", lockKey, aPID),
		Outcome: "granted", Tone: ToneGood})
	err = write(ctx, aConn.Conn(), valueA1)
	tl.record(withErr(Event{Actor: "A", Op: "put", Text: fmt.Sprintf("write %s = %q under the lock", lockReportKey, valueA1), Value: valueA1}, err))
	if err != nil {
		return fail("A's first write failed: %v", err)
	}

	bConn, err := pgx.Connect(ctx, pg.url)
	if err != nil {
		return res, err
	}
	defer bConn.Close(context.WithoutCancel(ctx))
	var got bool
	if err := bConn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lockKey).Scan(&got); err != nil {
		return res, err
	}
	if got {
		return fail("B took the advisory lock while A's connection held it")
	}
	tl.record(Event{Actor: "B", Op: "queue", Text: "pg_advisory_lock: held by A, waits", Outcome: "queued", Tone: ToneWait})
	bLocked := make(chan error, 1)
	go func() {
		_, err := bConn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey)
		bLocked <- err
	}()

	pauseStart := time.Now()
	wake := time.NewTimer(cfg.Pause)
	defer wake.Stop()
	tl.record(Event{Actor: "A", Op: "pause", Text: fmt.Sprintf("stop-the-world pause of %s begins", fmtDuration(cfg.Pause)),
		Outcome: "paused", Tone: ToneWait})

	// What the lock protects: however long A pauses, B waits while A's
	// connection lives (a lease would have expired after its TTL).
	select {
	case err := <-bLocked:
		return fail("B was granted the lock while A's connection lived (%v)", err)
	case <-ctx.Done():
		return res, context.Cause(ctx)
	case <-time.After(cfg.TTL):
	}
	tl.record(Event{Actor: "check", Op: "read", Text: fmt.Sprintf("B still waits %s into A's pause", fmtDuration(time.Since(pauseStart))),
		Outcome: "protected while A's connection lives", Tone: ToneGood})

	// Where it stops: the lock belongs to the connection.
	if _, err := pg.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", aPID); err != nil {
		return res, fmt.Errorf("drop A's connection: %w", err)
	}
	tl.record(Event{Actor: "demo", Op: "crash", Text: "A's connection drops (network cut, timeout)", Outcome: "dropped", Tone: ToneWait})
	select {
	case err := <-bLocked:
		if err != nil {
			return fail("B's wait for the lock failed: %v", err)
		}
	case <-ctx.Done():
		return res, context.Cause(ctx)
	}
	tl.record(Event{Actor: "B", Op: "acquire", Text: "pg_advisory_lock: freed with A's connection", Outcome: "granted", Tone: ToneGood})
	err = write(ctx, bConn, valueB1)
	tl.record(withErr(Event{Actor: "B", Op: "put", Text: fmt.Sprintf("write %s = %q under the lock", lockReportKey, valueB1), Value: valueB1}, err))
	if err != nil {
		return fail("B's write failed: %v", err)
	}
	bWrote := time.Now()
	if _, err := bConn.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockKey); err != nil {
		return fail("B could not unlock: %v", err)
	}
	tl.record(Event{Actor: "B", Op: "release", Text: "pg_advisory_unlock", Outcome: "ok", Tone: ToneGood})

	select {
	case <-wake.C:
	case <-ctx.Done():
		return res, context.Cause(ctx)
	}
	tl.record(Event{Actor: "A", Op: "wake", Text: "wakes up, still believing it holds the lock"})
	err = write(ctx, aConn.Conn(), valueA2)
	if err == nil {
		tl.record(withErr(Event{Actor: "A", Op: "put", Text: fmt.Sprintf("write %s = %q on its old connection", lockReportKey, valueA2), Value: valueA2}, err))
		return fail("A's write on its dropped connection succeeded")
	}
	tl.record(Event{Actor: "A", Op: "put", Text: fmt.Sprintf("write %s = %q on its old connection", lockReportKey, valueA2), Value: valueA2,
		Outcome: "failed: the connection is gone", Err: errOther, Tone: ToneWait})
	// Like a pool or a driver that reconnects, A goes on with a new
	// connection; nothing tells it the lock is gone.
	err = write(ctx, nil, valueA2)
	e := Event{Actor: "A", Op: "put", Text: fmt.Sprintf("write %s = %q on a new connection", lockReportKey, valueA2), Value: valueA2}
	if err != nil {
		tl.record(withErr(e, err))
		return fail("A's write on a new connection failed: %v", err)
	}
	e.Outcome, e.Tone = "ACCEPTED: no lock, no token to check", ToneBad
	tl.record(e)
	aWrote := time.Now()

	final, _, err := pg.Get(ctx, lockReportKey)
	if err != nil {
		return fail("reading the final value: %v", err)
	}
	check := Event{Actor: "check", Op: "read", Text: fmt.Sprintf("read %s = %q", lockReportKey, final), Value: final}
	if final == valueA2 && aWrote.After(bWrote) {
		check.Outcome, check.Tone = "LOST UPDATE: B's write was overwritten", ToneBad
		tl.record(check)
		res.Passed = true
		res.Summary = fmt.Sprintf("the advisory lock kept B out for as long as A's connection lived (%s into A's pause), "+
			"but it is tied to the connection: when it dropped, Postgres freed the lock, B wrote, and A, waking up on a new connection, "+
			"overwrote B's %q (LOST UPDATE). A lock has no token for the table to check; tenure_fence does (scenario postgres).",
			fmtDuration(cfg.TTL), valueB1)
		return res, nil
	}
	check.Outcome, check.Tone = "unexpected value", ToneBad
	tl.record(check)
	return fail("the final value is %q; want A's late %q over B's %q", final, valueA2, valueB1)
}

// lockReportKey is the row the DBLock scenario writes.
const lockReportKey = "ledger"
