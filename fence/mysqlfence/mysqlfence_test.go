package mysqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/mysqlfence"
)

func TestInstallIsIdempotent(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	res, err := mysqlfence.Install(ctx, d.db, "")
	if err != nil || res.From != 0 || res.To != mysqlfence.Version || res.Database != d.name {
		t.Fatalf("first Install = %+v, %v; want from 0 to %d in %s", res, err, mysqlfence.Version, d.name)
	}
	d.exec(t, "CALL tenure_fence('r', 7)")
	before := fingerprint(t, d)
	// Installing again, also concurrently, keeps what is there.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			res, err := mysqlfence.Install(ctx, d.db, d.name)
			if err == nil && (res.From != mysqlfence.Version || res.To != mysqlfence.Version) {
				err = fmt.Errorf("Install again = %+v; want from %d to %d", res, mysqlfence.Version, mysqlfence.Version)
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
	if after := fingerprint(t, d); after != before {
		t.Fatalf("installing again changed the fence: %s -> %s", before, after)
	}
	f, err := mysqlfence.New(ctx, d.db, mysqlfence.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if h, err := f.Highest(ctx, "r"); err != nil || h != 7 {
		t.Fatalf("Highest after reinstall = %d, %v; want 7", h, err)
	}
}

// TestOtherDatabase installs the fence in a database other than the
// connection's and fences through Config.Database.
func TestOtherDatabase(t *testing.T) {
	t.Parallel()
	d, other := newDB(t), newDB(t)
	ctx := context.Background()
	if _, err := mysqlfence.Install(ctx, d.db, other.name); err != nil {
		t.Fatal(err)
	}
	if _, err := mysqlfence.New(ctx, d.db, mysqlfence.DefaultConfig()); !errors.Is(err, mysqlfence.ErrNotInstalled) {
		t.Fatalf("New in the connection's database = %v; want ErrNotInstalled", err)
	}
	f, err := mysqlfence.New(ctx, d.db, mysqlfence.Config{Database: other.name})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Advance(ctx, "r", 4); err != nil {
		t.Fatal(err)
	}
	fencetest.WantStale(t, f.Advance(ctx, "r", 3), 3, 4)
	if h, err := mysqlfence.New(ctx, other.db, mysqlfence.DefaultConfig()); err != nil {
		t.Fatal(err)
	} else if n, _ := h.Highest(ctx, "r"); n != 4 {
		t.Fatalf("the fence in %s holds %d, want 4", other.name, n)
	}
}

func TestSchemaVersionMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		installed int
		installs  bool // whether Install migrates this version
	}{
		{"older", mysqlfence.Version - 1, true},
		{"newer", mysqlfence.Version + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			d.install(t, mysqlfence.DefaultConfig())
			d.exec(t, "CALL tenure_fence('r', 3)")
			d.exec(t, "UPDATE tenure_fence_schema SET version = ?", tc.installed)
			before := fingerprint(t, d)

			_, err := mysqlfence.New(ctx, d.db, mysqlfence.DefaultConfig())
			ve, ok := errors.AsType[*mysqlfence.VersionError](err)
			if !ok || !errors.Is(err, mysqlfence.ErrVersion) || ve.Installed != tc.installed || ve.Want != mysqlfence.Version {
				t.Fatalf("New = %v; want a *VersionError for version %d", err, tc.installed)
			}
			if !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("message %q does not say that nothing changed", err)
			}
			if after := fingerprint(t, d); after != before {
				t.Fatalf("New changed the database: %s -> %s", before, after)
			}
			res, err := mysqlfence.Install(ctx, d.db, "")
			if !tc.installs {
				if !errors.Is(err, mysqlfence.ErrVersion) {
					t.Fatalf("Install over a newer fence = %+v, %v; want ErrVersion", res, err)
				}
				if after := fingerprint(t, d); after != before {
					t.Fatalf("Install changed a newer fence: %s -> %s", before, after)
				}
				return
			}
			if err != nil || res.From != tc.installed || res.To != mysqlfence.Version {
				t.Fatalf("Install = %+v, %v; want a migration from %d", res, err, tc.installed)
			}
			f, err := mysqlfence.New(ctx, d.db, mysqlfence.DefaultConfig())
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
	_, err := mysqlfence.New(context.Background(), d.db, mysqlfence.DefaultConfig())
	if !errors.Is(err, mysqlfence.ErrNotInstalled) || !strings.Contains(err.Error(), "tenure fence install --mysql") {
		t.Fatalf("New on an empty database = %v; want ErrNotInstalled naming the installer", err)
	}
}

func TestInTx(t *testing.T) {
	t.Parallel()
	d, f := newLogDB(t)
	ctx := context.Background()
	d.txLog(f).Steps(t)
	// Resources are fenced apart, byte for byte: "jobs/x " is another
	// resource (a _bin collation would take it for "jobs/x"), and so is
	// "JOBS/X".
	for _, r := range []string{"jobs/y", "jobs/x ", "JOBS/X"} {
		if err := f.InTx(ctx, fence.Grant(r, 1), logWrite(100, 1)); err != nil {
			t.Fatalf("resource %q: %v", r, err)
		}
	}
}

func TestFailedFunctionRollsBackTheFence(t *testing.T) {
	t.Parallel()
	d, f := newLogDB(t)
	d.txLog(f).RollsBack(t)
}

// TestLargeTokens fences with tokens up to 2^64-1: the fence keeps
// BIGINT UNSIGNED.
func TestLargeTokens(t *testing.T) {
	t.Parallel()
	_, f := newLogDB(t)
	ctx := context.Background()
	for _, tok := range []uint64{1 << 53, 1<<53 + 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		if err := f.Advance(ctx, "big", tok); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
		if h, err := f.Highest(ctx, "big"); err != nil || h != tok {
			t.Fatalf("Highest = %d, %v; want %d", h, err, tok)
		}
	}
	fencetest.WantStale(t, f.Advance(ctx, "big", math.MaxUint64-1), math.MaxUint64-1, math.MaxUint64)
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
		{"resource too long", strings.Repeat("x", mysqlfence.MaxResourceLen+1), 1, fence.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) { d.txLog(f).Refuses(t, fence.Grant(tc.resource, tc.token), tc.want) })
	}
	// The procedure refuses the same, with its own SQLSTATE.
	for _, call := range []string{
		"CALL tenure_fence('', 1)", "CALL tenure_fence(NULL, 1)", "CALL tenure_fence('r', 0)",
		"CALL tenure_fence('r', -5)", "CALL tenure_fence('r', NULL)", "CALL tenure_fence('r', 18446744073709551616)",
		"CALL tenure_fence(REPEAT('x', 1025), 1)",
	} {
		_, err := d.db.Exec(call)
		me, ok := errors.AsType[*mysql.MySQLError](err)
		if !ok || string(me.SQLState[:]) != mysqlfence.InvalidSQLState {
			t.Fatalf("%s = %v; want SQLSTATE %s", call, err, mysqlfence.InvalidSQLState)
		}
	}
	if _, err := mysqlfence.New(ctx, d.db, mysqlfence.Config{Retries: -1}); err == nil {
		t.Fatal("New accepted negative retries")
	}
	if _, err := mysqlfence.New(ctx, d.db, mysqlfence.Config{Isolation: sql.LevelReadUncommitted}); err == nil {
		t.Fatal("New accepted read uncommitted")
	}
	if after := fingerprint(t, d); after != before {
		t.Fatalf("bad input changed the fence: %s -> %s", before, after)
	}
	if got := rows(t, d); len(got) != 0 {
		t.Fatalf("bad input wrote %v", got)
	}
}

// TestPlainSQL fences transactions with SQL statements alone, as a
// program in any language would: no Go guard, and the stale error is the
// driver's own, with SQLSTATE TF001 and the highest token in its message.
func TestPlainSQL(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.install(t, mysqlfence.DefaultConfig())
	d.exec(t, "CREATE TABLE reports (id INT PRIMARY KEY, body TEXT NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB")
	d.exec(t, "INSERT INTO reports VALUES (1, 'none', 0)")
	write := func(token int64, body string) error {
		tx, err := d.db.Begin()
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.Exec("CALL tenure_fence(?, ?)", "reports/1", token); err != nil {
			return err
		}
		if _, err := tx.Exec("UPDATE reports SET body = ?, token = ? WHERE id = 1", body, token); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := write(4, "from 4"); err != nil {
		t.Fatal(err)
	}
	if err := write(6, "from 6"); err != nil {
		t.Fatal(err)
	}
	err := write(5, "from 5, late")
	me, ok := errors.AsType[*mysql.MySQLError](err)
	want := "tenure_fence: stale token 5 for 'reports/1': a write with token 6 was accepted"
	if !ok || string(me.SQLState[:]) != mysqlfence.StaleSQLState || me.Number != 1644 || me.Message != want {
		t.Fatalf("stale write = %v; want error 1644 (%s): %s", err, mysqlfence.StaleSQLState, want)
	}
	var body string
	if err := d.db.QueryRow("SELECT body FROM reports WHERE id = 1").Scan(&body); err != nil || body != "from 6" {
		t.Fatalf("reports = %q, %v; want the write with token 6", body, err)
	}
}

// TestLongResourceMessage: the stale message keeps within MySQL's 128
// characters by shortening the name, never the tokens.
func TestLongResourceMessage(t *testing.T) {
	t.Parallel()
	_, f := newLogDB(t)
	ctx := context.Background()
	r := strings.Repeat("long/", 100)
	if err := f.Advance(ctx, r, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	fencetest.WantStale(t, f.Advance(ctx, r, math.MaxUint64-7), math.MaxUint64-7, math.MaxUint64)
}
