package pgfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/pgfence"
)

// BenchmarkPostgres compares a one-row UPDATE transaction with the same
// transaction fenced by tenure_fence (InTx), one at a time on one
// connection: the cost of the guard.
func BenchmarkPostgres(b *testing.B) {
	d := newDB(b)
	f := d.install(b, pgfence.DefaultConfig())
	d.exec(b, "CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL)")
	d.exec(b, "INSERT INTO counters VALUES (1, 0)")
	ctx := context.Background()
	update := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
		return err
	}
	b.Run("unfenced", func(b *testing.B) {
		for b.Loop() {
			if err := pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
				return update(ctx, tx)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		l := fence.Grant("counters/1", 1)
		for b.Loop() {
			if err := f.InTx(ctx, l, update); err != nil {
				b.Fatal(err)
			}
		}
	})
}
