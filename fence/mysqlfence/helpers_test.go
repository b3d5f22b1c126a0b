package mysqlfence_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/mysqlfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// testDB is a database of its own for one test, dropped when it ends.
type testDB struct {
	name, dsn string
	db        *sql.DB
}

// newDB creates a database for tb and returns a pool on it. It fails tb,
// saying what to start, when MySQL does not answer.
func newDB(tb testing.TB) *testDB {
	tb.Helper()
	name, dsn := storetest.MySQL(tb)
	return &testDB{name: name, dsn: dsn, db: storetest.MySQLDB(tb, dsn)}
}

// install installs the fence in d's database and returns a Fence on it.
func (d *testDB) install(tb testing.TB, cfg mysqlfence.Config) *mysqlfence.Fence {
	tb.Helper()
	ctx := context.Background()
	if _, err := mysqlfence.Install(ctx, d.db, ""); err != nil {
		tb.Fatalf("Install: %v", err)
	}
	f, err := mysqlfence.New(ctx, d.db, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return f
}

// newLogDB returns a database of tb's own with the fence installed and
// the log table created, and a Fence on it with the default
// configuration.
func newLogDB(tb testing.TB) (*testDB, *mysqlfence.Fence) {
	tb.Helper()
	d := newDB(tb)
	f := d.install(tb, mysqlfence.DefaultConfig())
	d.exec(tb, logTable)
	return d, f
}

// exec runs query outside any fence and fails tb on error.
func (d *testDB) exec(tb testing.TB, query string, args ...any) {
	tb.Helper()
	if _, err := d.db.Exec(query, args...); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
}

const logTable = "CREATE TABLE log (id BIGINT AUTO_INCREMENT PRIMARY KEY, writer BIGINT NOT NULL, token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB"

// logWrite is a fenced transaction's body: one row in log.
func logWrite(writer int, token uint64) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO log (writer, token) VALUES (?, ?)", writer, token)
		return err
	}
}

// rows returns the (writer, token) pairs of table log in id order.
func rows(tb testing.TB, d *testDB) [][2]uint64 {
	tb.Helper()
	r, err := d.db.Query("SELECT writer, token FROM log ORDER BY id")
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	var out [][2]uint64
	for r.Next() {
		var w, tok uint64
		if err := r.Scan(&w, &tok); err != nil {
			tb.Fatal(err)
		}
		out = append(out, [2]uint64{w, tok})
	}
	if err := r.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// fingerprint is what a database holds of the fence: its version, its
// fences and the definition of tenure_fence; a refused call must not
// change it.
func fingerprint(tb testing.TB, d *testDB) string {
	tb.Helper()
	var s string
	err := d.db.QueryRow(`SELECT CONCAT(
	COALESCE((SELECT GROUP_CONCAT(version) FROM tenure_fence_schema), '-'), '|',
	COALESCE((SELECT GROUP_CONCAT(CONCAT(HEX(resource), '=', token) ORDER BY resource) FROM tenure_fences), '-'), '|',
	COALESCE((SELECT MD5(ROUTINE_DEFINITION) FROM information_schema.ROUTINES
	          WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = 'tenure_fence'), '-'))`).Scan(&s)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// txLog is f on d's log table, for the checks that fencetest.TxLog
// shares with pgfence.
func (d *testDB) txLog(f *mysqlfence.Fence) fencetest.TxLog {
	return fencetest.TxLog{
		InTx: func(ctx context.Context, l fence.Lease, body func(log func(writer int) error) error) error {
			return f.InTx(ctx, l, func(ctx context.Context, tx *sql.Tx) error {
				return body(func(writer int) error { return logWrite(writer, l.Token())(ctx, tx) })
			})
		},
		Highest: f.Highest,
		Rows: func(tb testing.TB) []fencetest.Entry {
			var out []fencetest.Entry
			for _, r := range rows(tb, d) {
				out = append(out, fencetest.Entry{Writer: int(r[0]), Token: r[1]})
			}
			return out
		},
	}
}
