package mysqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/go-sql-driver/mysql"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/mysqlfence"
	"github.com/tenure-io/tenure/internal/storetest"
)

// exampleDB makes a database of its own for an example, with a reports
// table, and returns a pool on it and a function that drops it.
func exampleDB() (*sql.DB, func()) {
	cfg, err := mysql.ParseDSN(storetest.MySQLDSN())
	if err != nil {
		log.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	cfg.DBName = storetest.Name("tenure_example_")
	if _, err := admin.Exec("CREATE DATABASE " + cfg.DBName); err != nil {
		log.Fatalf("MySQL at %s: %v", storetest.MySQLDSN(), err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE reports (id INT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB"); err != nil {
		log.Fatal(err)
	}
	return db, func() {
		db.Close()
		admin.Exec("DROP DATABASE " + cfg.DBName)
		admin.Close()
	}
}

func ExampleFence_InTx() {
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()
	if _, err := mysqlfence.Install(ctx, db, ""); err != nil {
		log.Fatal(err)
	}
	f, err := mysqlfence.New(ctx, db, mysqlfence.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}

	// write is a report written under a lease: an *election.Lease in a
	// program, plain numbers here.
	write := func(token uint64, body string) error {
		return f.InTx(ctx, fence.Grant("reports/daily", token), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO reports VALUES (1, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)", body)
			return err
		})
	}
	fmt.Println(write(7, "from the holder of token 7"))
	fmt.Println(write(8, "from the holder of token 8"))
	err = write(7, "late, from the holder of token 7")
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var body string
	db.QueryRow("SELECT body FROM reports WHERE id = 1").Scan(&body)
	fmt.Println(body)
	// Output:
	// <nil>
	// <nil>
	// true fence: stale token 7 for "reports/daily": a write with token 8 was accepted
	// from the holder of token 8
}

func ExampleReadModifyWrite() {
	db, drop := exampleDB()
	defer drop()
	ctx := context.Background()
	if _, err := mysqlfence.Install(ctx, db, ""); err != nil {
		log.Fatal(err)
	}
	f, err := mysqlfence.New(ctx, db, mysqlfence.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	// Append a line to a report: the read and the write in one fenced
	// transaction, so no late holder's write lands in between.
	appendLine := func(token uint64, line string) error {
		return mysqlfence.ReadModifyWrite(ctx, f, fence.Grant("reports/daily", token),
			func(ctx context.Context, tx *sql.Tx) (string, error) {
				var body string
				err := tx.QueryRowContext(ctx, "SELECT body FROM reports WHERE id = 1").Scan(&body)
				if errors.Is(err, sql.ErrNoRows) {
					return "", nil
				}
				return body, err
			},
			func(ctx context.Context, tx *sql.Tx, body string) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO reports VALUES (1, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)", body+line+"\n")
				return err
			})
	}
	fmt.Println(appendLine(3, "first, token 3"))
	fmt.Println(appendLine(4, "second, token 4"))
	fmt.Println(errors.Is(appendLine(3, "late, token 3"), fence.ErrStale))

	var body string
	db.QueryRow("SELECT body FROM reports WHERE id = 1").Scan(&body)
	fmt.Print(body)
	// Output:
	// <nil>
	// <nil>
	// true
	// first, token 3
	// second, token 4
}
