package pgfence_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence/pgfence"
)

// postgresURL is the database the tests use: $TENURE_TEST_POSTGRES, or
// the one .ci/run starts.
func postgresURL() string {
	if u := os.Getenv("TENURE_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// testDB is a schema of its own for one test, dropped when it ends.
type testDB struct {
	schema string
	q      string // quoted schema
	pool   *pgxpool.Pool
}

// newDB creates a schema for tb and returns a pool whose connections
// have it as their search_path. It fails tb, saying what to start, when
// Postgres does not answer.
func newDB(tb testing.TB, opts ...func(*pgxpool.Config)) *testDB {
	tb.Helper()
	schema := "tenure_test_" + strings.ToLower(rand.Text()[:12])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		tb.Fatalf("Postgres is not reachable at %s: %v\nStart it (.ci/run does: pg_ctlcluster 15 main start) or set TENURE_TEST_POSTGRES to a database URL.", postgresURL(), err)
	}
	defer admin.Close(ctx)
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, postgresURL())
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+q+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	pool := newPool(tb, schema, opts...)
	return &testDB{schema: schema, q: q, pool: pool}
}

// newPool returns a pool on the test database with search_path schema,
// closed when tb ends.
func newPool(tb testing.TB, schema string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(postgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
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

// exec runs sql outside any fence and fails tb on error.
func (d *testDB) exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}
