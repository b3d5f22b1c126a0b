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

// testDB is a schema of its own for one test, dropped when it ends.
type testDB struct {
	schema string
	pool   *pgxpool.Pool
}

// newDB creates a schema for tb and returns a pool whose connections
// have it as their search_path. It fails tb, saying what to start, when
// Postgres does not answer.
func newDB(tb testing.TB, opts ...func(*pgxpool.Config)) *testDB {
	tb.Helper()
	schema := storetest.Schema(tb)
	return &testDB{schema: schema, pool: storetest.Pool(tb, schema, opts...)}
}

// install installs the fence in d's schema and returns a Fence on it.
func (d *testDB) install(tb testing.TB, cfg pgfence.Config) *pgfence.Fence {
	tb.Helper()
	ctx := context.Background()
	if _, err := pgfence.Install(ctx, d.pool, d.schema); err != nil {
		tb.Fatalf("Install: %v", err)
	}
	cfg.Schema = d.schema
	f, err := pgfence.New(ctx, d.pool, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return f
}

// newLogDB returns a schema of tb's own with the fence installed and
// the log table created, and a Fence on it with the default
// configuration.
func newLogDB(tb testing.TB) (*testDB, *pgfence.Fence) {
	tb.Helper()
	d := newDB(tb)
	f := d.install(tb, pgfence.DefaultConfig())
	d.exec(tb, logTable)
	return d, f
}

// exec runs sql outside any fence and fails tb on error.
func (d *testDB) exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// txLog is f on d's log table, for the checks that fencetest.TxLog
// shares with mysqlfence.
func (d *testDB) txLog(f *pgfence.Fence) fencetest.TxLog {
	return fencetest.TxLog{
		InTx: func(ctx context.Context, l fence.Lease, body func(log func(writer int) error) error) error {
			return f.InTx(ctx, l, func(ctx context.Context, tx pgx.Tx) error {
				return body(func(writer int) error { return logWrite(writer, l.Token())(ctx, tx) })
			})
		},
		Highest: f.Highest,
		Rows: func(tb testing.TB) []fencetest.Entry {
			var out []fencetest.Entry
			for _, r := range rows(tb, d) {
				out = append(out, fencetest.Entry{Writer: int(r[0]), Token: uint64(r[1])})
			}
			return out
		},
	}
}
