package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/pgfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// exampleSchema makes a schema of its own for an example, with a reports
// table, and returns its name, a pool that uses it and a function that
// drops it.
func exampleSchema() (string, *pgxpool.Pool, func()) {
	ctx := context.Background()
	name := storetest.Name("tenure_example_")
	cfg, err := pgxpool.ParseConfig(storetest.PostgresURL())
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+name+"; CREATE TABLE "+name+".reports (id int PRIMARY KEY, body text NOT NULL)"); err != nil {
		log.Fatalf("Postgres at %s: %v", storetest.PostgresURL(), err)
	}
	return name, pool, func() {
		pool.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
		pool.Close()
	}
}

func ExampleFence_InTx() {
	schema, pool, drop := exampleSchema()
	defer drop()
	ctx := context.Background()
	if _, err := pgfence.Install(ctx, pool, schema); err != nil {
		log.Fatal(err)
	}
	f, err := pgfence.New(ctx, pool, pgfence.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}

	// write is a report written under a lease: an *election.Lease in a
	// program, plain numbers here.
	write := func(token uint64, body string) error {
		return f.InTx(ctx, fence.Grant("reports/daily", token), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO reports VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET body = excluded.body", body)
			return err
		})
	}
	fmt.Println(write(7, "from the holder of token 7"))
	fmt.Println(write(8, "from the holder of token 8"))
	err = write(7, "late, from the holder of token 7")
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var body string
	pool.QueryRow(ctx, "SELECT body FROM reports WHERE id = 1").Scan(&body)
	fmt.Println(body)
	// Output:
	// <nil>
	// <nil>
	// true fence: stale token 7 for "reports/daily": a write with token 8 was accepted
	// from the holder of token 8
}
