package mysqlfence_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
	"github.com/tenure-io/tenure/fence/mysqlfence"
)

// TestReadModifyWrite plays the lost update of docs/fencing.md (see
// fencetest.ReadModifyWrite) on a row of a table: ReadModifyWrite is the
// fenced read-modify-write, where A's late write waits for B's fence row
// and is refused once B has committed; a read in a transaction of its
// own, outside the fence, is the bug it prevents.
func TestReadModifyWrite(t *testing.T) {
	t.Parallel()
	fencetest.ReadModifyWrite(t, func(t *testing.T) fencetest.RMW {
		d, f := newLogDB(t)
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
		return fencetest.RMW{
			Write: func(ctx context.Context, l fence.Lease, list string) error {
				return f.InTx(ctx, l, func(ctx context.Context, tx *sql.Tx) error { return write(ctx, tx, list) })
			},
			Read: func(ctx context.Context) (string, error) {
				var list string
				err := d.db.QueryRowContext(ctx, "SELECT list FROM writers WHERE id = 1").Scan(&list)
				return list, err
			},
			Update: func(ctx context.Context, l fence.Lease, modify func(string) string) error {
				// modify runs in read, right after B's read, where A
				// wakes up.
				return mysqlfence.ReadModifyWrite(ctx, f, l, func(ctx context.Context, tx *sql.Tx) (string, error) {
					old, err := read(ctx, tx)
					if err != nil {
						return "", err
					}
					return modify(old), nil
				}, write)
			},
			Blocked: func() bool { return lockWaits(t, d) > 0 },
		}
	})
}
