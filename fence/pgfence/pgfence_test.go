package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

func TestInstallIsIdempotent(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	res, err := pgfence.Install(ctx, d.pool, d.schema)
	if err != nil || res.From != 0 || res.To != pgfence.Version {
		t.Fatalf("first Install = %+v, %v; want from 0 to %d", res, err, pgfence.Version)
	}
	d.exec(t, "SELECT tenure_fence('r', 7)")
	// Installing again, also concurrently, keeps what is there.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			res, err := pgfence.Install(ctx, d.pool, d.schema)
			if err == nil && (res.From != pgfence.Version || res.To != pgfence.Version) {
				err = fmt.Errorf("Install again = %+v; want from %d to %d", res, pgfence.Version, pgfence.Version)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: d.schema})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := f.Highest(ctx, "r"); err != nil || h != 7 {
		t.Fatalf("Highest after reinstall = %d, %v; want 7", h, err)
	}
}

func TestInstallCreatesSchema(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	// A schema Install creates; schemas do not nest, so it is dropped
	// here rather than with the test's.
	other := d.schema + "_x"
	t.Cleanup(func() {
		d.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{other}.Sanitize()+" CASCADE")
	})
	if _, err := pgfence.Install(ctx, d.pool, other); err != nil {
		t.Fatal(err)
	}
	f, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: other})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Advance(ctx, "r", 1); err != nil {
		t.Fatal(err)
	}
}

// fingerprint is what a schema holds: its version, its fences and the
// definition of tenure_fence; a refused call must not change it.
func fingerprint(t *testing.T, d *testDB) string {
	t.Helper()
	var s string
	err := d.pool.QueryRow(context.Background(), `
SELECT coalesce((SELECT string_agg(version::text, ',') FROM tenure_fence_schema), '-') || '|' ||
       coalesce((SELECT string_agg(resource || '=' || token, ',' ORDER BY resource) FROM tenure_fences), '-') || '|' ||
       coalesce((SELECT md5(prosrc) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = $1 AND p.proname = 'tenure_fence'), '-')`, d.schema).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSchemaVersionMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		installed int
		// installs reports whether Install migrates this version.
		installs bool
	}{
		{"older", pgfence.Version - 1, true},
		{"newer", pgfence.Version + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			d.install(t, pgfence.DefaultConfig())
			d.exec(t, "SELECT tenure_fence('r', 3)")
			d.exec(t, "UPDATE tenure_fence_schema SET version = $1", tc.installed)
			before := fingerprint(t, d)

			_, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: d.schema})
			ve, ok := errors.AsType[*pgfence.VersionError](err)
			if !ok || !errors.Is(err, pgfence.ErrVersion) || ve.Installed != tc.installed || ve.Want != pgfence.Version {
				t.Fatalf("New = %v; want a *VersionError for version %d", err, tc.installed)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("version %d", tc.installed)) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("message %q does not say the versions and that nothing changed", err)
			}
			t.Logf("New: %v", err)
			if after := fingerprint(t, d); after != before {
				t.Fatalf("New changed the schema: %s -> %s", before, after)
			}

			res, err := pgfence.Install(ctx, d.pool, d.schema)
			if !tc.installs {
				if !errors.Is(err, pgfence.ErrVersion) {
					t.Fatalf("Install over a newer schema = %+v, %v; want ErrVersion", res, err)
				}
				t.Logf("Install: %v", err)
				if after := fingerprint(t, d); after != before {
					t.Fatalf("Install changed a newer schema: %s -> %s", before, after)
				}
				return
			}
			if err != nil || res.From != tc.installed || res.To != pgfence.Version {
				t.Fatalf("Install = %+v, %v; want a migration from %d", res, err, tc.installed)
			}
			f, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: d.schema})
			if err != nil {
				t.Fatal(err)
			}
			if h, _ := f.Highest(ctx, "r"); h != 3 {
				t.Fatalf("the migration lost the fence: highest %d, want 3", h)
			}
		})
	}
}

func TestNotInstalled(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	_, err := pgfence.New(context.Background(), d.pool, pgfence.Config{Schema: d.schema})
	if !errors.Is(err, pgfence.ErrNotInstalled) || !strings.Contains(err.Error(), "tenure fence install") {
		t.Fatalf("New on an empty schema = %v; want ErrNotInstalled naming the installer", err)
	}
}

// rows returns the (writer, token) pairs of table log in id order.
func rows(tb testing.TB, d *testDB) [][2]int64 {
	tb.Helper()
	r, err := d.pool.Query(context.Background(), "SELECT writer, token FROM log ORDER BY id")
	if err != nil {
		tb.Fatal(err)
	}
	out, err := pgx.CollectRows(r, func(r pgx.CollectableRow) ([2]int64, error) {
		var w, tok int64
		err := r.Scan(&w, &tok)
		return [2]int64{w, tok}, err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

const logTable = "CREATE TABLE log (id bigserial PRIMARY KEY, writer bigint NOT NULL, token bigint NOT NULL)"

// logWrite is a fenced transaction's body: one row in log.
func logWrite(writer int, token uint64) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO log (writer, token) VALUES ($1, $2)", writer, int64(token))
		return err
	}
}

func TestInTx(t *testing.T) {
	t.Parallel()
	d, f := newLogDB(t)
	ctx := context.Background()
	d.txLog(f).Steps(t)
	// Resources are fenced apart.
	if err := f.InTx(ctx, fence.Grant("jobs/y", 1), logWrite(100, 1)); err != nil {
		t.Fatalf("another resource: %v", err)
	}
}

func TestFailedFunctionRollsBackTheFence(t *testing.T) {
	t.Parallel()
	d, f := newLogDB(t)
	d.txLog(f).RollsBack(t)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	d, f := newLogDB(t)
	ctx := context.Background()
	before := fingerprint(t, d)
	for _, tc := range []struct {
		name     string
		resource string
		token    uint64
		want     error
	}{
		{"empty resource", "", 1, fence.ErrEmptyResource},
		{"token 0", "r", 0, fence.ErrZeroToken},
		{"token above bigint", "r", math.MaxInt64 + 1, fence.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) { d.txLog(f).Refuses(t, fence.Grant(tc.resource, tc.token), tc.want) })
	}
	// The SQL function refuses the same, with its own SQLSTATE.
	for _, call := range []string{"SELECT tenure_fence('', 1)", "SELECT tenure_fence(NULL, 1)", "SELECT tenure_fence('r', 0)", "SELECT tenure_fence('r', -5)", "SELECT tenure_fence('r', NULL)"} {
		_, err := d.pool.Exec(ctx, call)
		pe, ok := errors.AsType[*pgconn.PgError](err)
		if !ok || pe.Code != pgfence.InvalidSQLState {
			t.Fatalf("%s = %v; want SQLSTATE %s", call, err, pgfence.InvalidSQLState)
		}
	}
	if _, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: d.schema, Retries: -1}); err == nil {
		t.Fatal("New accepted negative retries")
	}
	if _, err := pgfence.New(ctx, d.pool, pgfence.Config{Schema: d.schema, IsoLevel: "read uncommitted"}); err == nil {
		t.Fatal("New accepted read uncommitted")
	}
	if after := fingerprint(t, d); after != before {
		t.Fatalf("bad input changed the schema: %s -> %s", before, after)
	}
	if got := rows(t, d); len(got) != 0 {
		t.Fatalf("bad input wrote %v", got)
	}
}

// TestPlainSQL fences transactions with SQL alone, as a program in any
// language would: no Go guard, only statements.
func TestPlainSQL(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.install(t, pgfence.DefaultConfig())
	d.exec(t, "CREATE TABLE reports (id int PRIMARY KEY, body text NOT NULL, token bigint NOT NULL)")
	d.exec(t, "INSERT INTO reports VALUES (1, 'none', 0)")
	ctx := context.Background()
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()

	write := func(token int64, body string) error {
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		for _, st := range []struct {
			sql  string
			args []any
		}{
			{"SELECT tenure_fence($1, $2)", []any{"reports/1", token}},
			{"UPDATE reports SET body = $1, token = $2 WHERE id = 1", []any{body, token}},
		} {
			if _, err := c.Exec(ctx, st.sql, st.args...); err != nil {
				c.Exec(ctx, "ROLLBACK")
				return err
			}
		}
		_, err := c.Exec(ctx, "COMMIT")
		return err
	}
	if err := write(4, "from 4"); err != nil {
		t.Fatal(err)
	}
	if err := write(6, "from 6"); err != nil {
		t.Fatal(err)
	}
	err = write(5, "from 5, late")
	pe, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || pe.Code != pgfence.StaleSQLState || pe.Detail != "highest token: 6" {
		t.Fatalf("stale write = %v; want SQLSTATE %s with DETAIL \"highest token: 6\"", err, pgfence.StaleSQLState)
	}
	t.Logf("stale write: %s (DETAIL %s; HINT %s)", pe.Message, pe.Detail, pe.Hint)
	var body string
	var token int64
	if err := c.QueryRow(ctx, "SELECT body, token FROM reports WHERE id = 1").Scan(&body, &token); err != nil {
		t.Fatal(err)
	}
	if body != "from 6" || token != 6 {
		t.Fatalf("reports = %q (token %d); want the write with token 6", body, token)
	}
}

// TestPsql drives the fence from psql, when it is installed.
func TestPsql(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("psql is not installed; TestPlainSQL covers plain SQL")
	}
	d := newDB(t)
	d.install(t, pgfence.DefaultConfig())
	d.exec(t, "CREATE TABLE reports (id int PRIMARY KEY, body text NOT NULL)")
	run := func(token int, body string) (string, error) {
		script := fmt.Sprintf(`BEGIN;
SELECT tenure_fence('reports', %d);
INSERT INTO reports VALUES (1, '%s') ON CONFLICT (id) DO UPDATE SET body = excluded.body;
COMMIT;`, token, body)
		cmd := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", storetest.PostgresURL())
		cmd.Env = append(cmd.Environ(), "PGOPTIONS=-c search_path="+d.schema)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(10, "ten"); err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	out, err := run(9, "nine")
	if err == nil || !strings.Contains(out, "stale token 9") {
		t.Fatalf("psql with a stale token: err %v, output:\n%s", err, out)
	}
	var body string
	if err := d.pool.QueryRow(context.Background(), "SELECT body FROM reports WHERE id = 1").Scan(&body); err != nil || body != "ten" {
		t.Fatalf("reports = %q, %v; want ten", body, err)
	}
}

// onlyBeginTx hides the pool's type, so InTx takes its path for other
// DBs: BEGIN, then the fence, in two round trips.
type onlyBeginTx struct{ pgfence.DB }

// TestPaths runs the same fenced writes through a pool, a connection and
// another DB, with resource names that need quoting, and checks that a
// stale token leaves each connection usable.
func TestPaths(t *testing.T) {
	t.Parallel()
	d, _ := newLogDB(t)
	ctx := context.Background()
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for i, tc := range []struct {
		name string
		db   pgfence.DB
	}{
		{"pool", d.pool},
		{"conn", conn.Conn()},
		{"other", onlyBeginTx{d.pool}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := pgfence.New(ctx, tc.db, pgfence.Config{Schema: d.schema})
			if err != nil {
				t.Fatal(err)
			}
			resource := fmt.Sprintf(`it's %s \' "x"); DROP TABLE log; --`, tc.name)
			newConns := d.pool.Stat().NewConnsCount()
			for j, s := range []struct {
				token uint64
				stale bool
			}{{4, false}, {3, true}, {4, false}, {2, true}, {1, true}, {5, false}} {
				err := f.InTx(ctx, fence.Grant(resource, s.token), logWrite(i*10+j, s.token))
				if got := errors.Is(err, fence.ErrStale); got != s.stale || (!s.stale && err != nil) {
					t.Fatalf("token %d: %v; want stale %t", s.token, err, s.stale)
				}
			}
			if h, err := f.Highest(ctx, resource); err != nil || h != 5 {
				t.Fatalf("Highest(%q) = %d, %v; want 5", resource, h, err)
			}
			if n := d.pool.Stat().NewConnsCount() - newConns; n > 1 {
				t.Fatalf("stale tokens cost %d new connections", n)
			}
		})
	}
	// The connection is not left in a failed transaction.
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the connection after stale tokens: %v", err)
	}
	if got := len(rows(t, d)); got != 9 {
		t.Fatalf("%d rows, want 3 per path", got)
	}
}
