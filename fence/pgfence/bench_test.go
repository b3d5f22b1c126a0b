package pgfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/internal/benchpair"
	"github.com/tenure-io/tenure/internal/storetest"
)

// BenchmarkPostgres compares a one-row UPDATE transaction with the same
// transaction fenced by tenure_fence (InTx), one at a time: the cost of
// the guard. The async-commit pair runs with synchronous_commit off, so
// that the commit's WAL flush, which dominates on most disks, does not
// hide the guard's own cost (a statement, a row update).
func BenchmarkPostgres(b *testing.B) {
	d := newDB(b)
	d.install(b, pgfence.DefaultConfig())
	d.exec(b, "CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL)")
	d.exec(b, "INSERT INTO counters VALUES (1, 0)")
	ctx := context.Background()
	update := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE counters SET n = n + 1 WHERE id = 1")
		return err
	}
	pair := func(b *testing.B, pool *pgxpool.Pool) {
		f, err := pgfence.New(ctx, pool, pgfence.Config{Schema: d.schema})
		if err != nil {
			b.Fatal(err)
		}
		l := fence.Grant("counters/1", 1)
		unfenced := func() error {
			return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
				return update(ctx, tx)
			})
		}
		fenced := func() error { return f.InTx(ctx, l, update) }
		benchpair.Compare(b, unfenced, fenced)
	}
	pair(b, d.pool)
	b.Run("async-commit", func(b *testing.B) {
		pair(b, storetest.Pool(b, d.schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["synchronous_commit"] = "off" }))
	})
}
