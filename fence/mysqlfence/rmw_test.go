package mysqlfence_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/mysqlfence"
)

// TestReadModifyWrite plays the lost update of docs/fencing.md. A (token
// 1) has written; its lease expired and B (token 2) does a
// read-modify-write: it reads the list of writers, appends itself and
// writes the list back. Between B's read and B's write, A wakes up and
// appends itself too (its own read-modify-write, with token 1).
//
// With ReadModifyWrite, A's write waits for B's fence row and is refused
// once B has committed: the list holds A's first write and B's. With the
// read outside the fenced transaction (the bug it prevents, run here to
// show the test catches it), A's write passes the fence, B had not
// raised it yet, and B's write then replaces the list with one computed
// from before A's write: A was told ok and its write is gone.
func TestReadModifyWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fenced   bool
		wantLost bool
	}{
		{"ReadModifyWrite", true, false},
		{"read outside the fence (the bug)", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, f := newLogDB(t)
			ctx := context.Background()
			d.exec(t, "CREATE TABLE writers (id INT PRIMARY KEY, list TEXT NOT NULL) ENGINE=InnoDB")
			d.exec(t, "INSERT INTO writers VALUES (1, '')")
			read := func(ctx context.Context, tx *sql.Tx) (string, error) {
				var list string
				err := tx.QueryRowContext(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list)
				return list, err
			}
			write := func(ctx context.Context, tx *sql.Tx, list string) error {
				_, err := tx.ExecContext(ctx, "UPDATE writers SET list = ? WHERE id = 1", list)
				return err
			}
			appendAs := func(who string) func(context.Context, *sql.Tx, string) error {
				return func(ctx context.Context, tx *sql.Tx, list string) error { return write(ctx, tx, list+who+";") }
			}
			a, b := fence.Grant("reports", 1), fence.Grant("reports", 2)
			if err := mysqlfence.ReadModifyWrite(ctx, f, a, read, appendAs("A1")); err != nil {
				t.Fatal(err)
			}

			var lateErr func() error
			late := func() {
				lateErr = fencetest.StartLate(t, func() error { return mysqlfence.ReadModifyWrite(ctx, f, a, read, appendAs("A2")) },
					func() bool { return lockWaits(t, d) > 0 })
			}
			var err error
			if tc.fenced {
				err = mysqlfence.ReadModifyWrite(ctx, f, b, func(ctx context.Context, tx *sql.Tx) (string, error) {
					list, err := read(ctx, tx)
					late() // A wakes up between B's read and B's write
					return list, err
				}, appendAs("B"))
			} else {
				// B reads in a transaction of its own, unfenced.
				var list string
				if err = d.db.QueryRowContext(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list); err == nil {
					late()
					err = f.InTx(ctx, b, func(ctx context.Context, tx *sql.Tx) error { return appendAs("B")(ctx, tx, list) })
				}
			}
			if err != nil {
				t.Fatalf("B: %v", err)
			}
			aErr := lateErr()
			var list string
			if err := d.db.QueryRow("SELECT list FROM writers WHERE id = 1").Scan(&list); err != nil {
				t.Fatal(err)
			}
			t.Logf("A's late write: %v; list %q", aErr, list)
			lost := aErr == nil && !strings.Contains(list, "A2;")
			if lost != tc.wantLost {
				t.Fatalf("A's late write: %v; list %q; lost update %t, want %t", aErr, list, lost, tc.wantLost)
			}
			if tc.fenced {
				fencetest.WantStale(t, aErr, 1, 2)
				if list != "A1;B;" {
					t.Fatalf("list = %q, want A's first write and B's", list)
				}
			}
		})
	}
}
