package main

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-io/tenure/internal/storetest"
)

// testPostgres returns the URL of the test database and a schema name of
// the test's own, dropped when it ends. It fails t, saying what to start,
// when Postgres does not answer.
func testPostgres(t *testing.T) (url, schema string, conn *pgx.Conn) {
	t.Helper()
	url = os.Getenv("TENURE_TEST_POSTGRES")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("Postgres is not reachable at %s: %v\nStart it (.ci/run does) or set TENURE_TEST_POSTGRES.", url, err)
	}
	schema = "tenure_test_" + strings.ToLower(rand.Text()[:12])
	t.Cleanup(func() {
		conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		conn.Close(context.Background())
	})
	return url, schema, conn
}

// fenceCLI runs the CLI in-process with an empty environment.
func fenceCLI(args ...string) (code int, stdout, stderr string) {
	r := runCLI(context.Background(), nil, args...)
	return r.code, r.stdout, r.stderr
}

func TestFenceInstall(t *testing.T) {
	t.Parallel()
	url, schema, conn := testPostgres(t)
	code, out, errs := fenceCLI("fence", "install", "--postgres", url, "--schema", schema)
	if code != exitOK || !strings.Contains(out, "version 1 installed") {
		t.Fatalf("install: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = fenceCLI("fence", "install", "--postgres", url, "--schema", schema, "-o", "json")
	if code != exitOK || out != `{"schema":"`+schema+`","from":1,"to":1}`+"\n" {
		t.Fatalf("install again: exit %d, stdout %q", code, out)
	}
	// The function works from SQL.
	ctx := context.Background()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "SELECT "+q+".tenure_fence('r', 2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT "+q+".tenure_fence('r', 1)"); err == nil || !strings.Contains(err.Error(), "TF001") {
		t.Fatalf("a stale token: %v; want SQLSTATE TF001", err)
	}

	// A newer schema is refused (exit 1) and left as it is.
	if _, err := conn.Exec(ctx, "UPDATE "+q+".tenure_fence_schema SET version = 99"); err != nil {
		t.Fatal(err)
	}
	code, _, errs = fenceCLI("fence", "install", "--postgres", url, "--schema", schema)
	if code != exitFailure || !strings.Contains(errs, "version 99, newer") {
		t.Fatalf("install over a newer schema: exit %d, stderr %q", code, errs)
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT version FROM "+q+".tenure_fence_schema").Scan(&v); err != nil || v != 99 {
		t.Fatalf("version after a refused install = %d, %v", v, err)
	}
}

func TestFenceInstallMySQL(t *testing.T) {
	t.Parallel()
	database, dsn := storetest.MySQL(t)
	code, out, errs := fenceCLI("fence", "install", "--mysql", dsn)
	if code != exitOK || out != "tenure_fence version 1 installed in database "+database+"\n" {
		t.Fatalf("install: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = fenceCLI("fence", "install", "--mysql", dsn, "-o", "json")
	if code != exitOK || out != `{"database":"`+database+`","from":1,"to":1}`+"\n" {
		t.Fatalf("install again: exit %d, stdout %q", code, out)
	}
	// The procedure works from SQL.
	db := storetest.MySQLDB(t, dsn)
	if _, err := db.Exec("CALL tenure_fence('r', 2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CALL tenure_fence('r', 1)"); err == nil || !strings.Contains(err.Error(), "TF001") {
		t.Fatalf("a stale token: %v; want SQLSTATE TF001", err)
	}
	// A newer fence is refused (exit 1) and left as it is.
	if _, err := db.Exec("UPDATE tenure_fence_schema SET version = 99"); err != nil {
		t.Fatal(err)
	}
	code, _, errs = fenceCLI("fence", "install", "--mysql", dsn)
	if code != exitFailure || !strings.Contains(errs, "version 99, newer") {
		t.Fatalf("install over a newer fence: exit %d, stderr %q", code, errs)
	}
	var v int
	if err := db.QueryRow("SELECT version FROM tenure_fence_schema").Scan(&v); err != nil || v != 99 {
		t.Fatalf("version after a refused install = %d, %v", v, err)
	}
}

func TestFenceInstallBadUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no command", []string{"fence"}, exitUsage, "no command"},
		{"unknown command", []string{"fence", "remove"}, exitUsage, "unknown command"},
		{"no url", []string{"fence", "install"}, exitUsage, "--postgres or --mysql is required"},
		{"both", []string{"fence", "install", "--postgres", "postgres://127.0.0.1/x", "--mysql", "root@tcp(127.0.0.1:3306)/x"}, exitUsage, "give one"},
		{"mysql with schema", []string{"fence", "install", "--mysql", "root@tcp(127.0.0.1:3306)/x", "--schema", "s"}, exitUsage, "--schema is for --postgres"},
		{"empty dsn", []string{"fence", "install", "--mysql", ""}, exitUsage, "--mysql is empty"},
		{"bad dsn", []string{"fence", "install", "--mysql", "root@tcp(127.0.0.1:3306"}, exitUsage, "--mysql: "},
		{"dsn without database", []string{"fence", "install", "--mysql", "root@tcp(127.0.0.1:3306)/"}, exitUsage, "names no database"},
		{"mysql unreachable", []string{"fence", "install", "--mysql", "root@tcp(127.0.0.1:1)/test"}, exitFailure, "connect to MySQL at 127.0.0.1:1"},
		{"mysql unknown database", []string{"fence", "install", "--mysql", "root@tcp(127.0.0.1:3306)/tenure_no_such_db"}, exitFailure, "tenure_no_such_db"},
		{"bad url", []string{"fence", "install", "--postgres", "bogus://x y"}, exitUsage, "--postgres"},
		{"empty schema", []string{"fence", "install", "--postgres", "postgres://127.0.0.1/x", "--schema", ""}, exitUsage, "--schema"},
		{"argument", []string{"fence", "install", "extra", "--postgres", "postgres://127.0.0.1/x"}, exitUsage, "unexpected argument"},
		{"unreachable", []string{"fence", "install", "--postgres", "postgres://postgres@127.0.0.1:1/test?sslmode=disable"}, exitFailure, "connect to Postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := fenceCLI(tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, errs, tc.code, tc.msg)
			}
		})
	}
	if code, out, _ := fenceCLI("fence", "install", "-h"); code != exitOK || !strings.Contains(out, "tenure_fence") {
		t.Fatalf("-h: exit %d, %q", code, out)
	}
}

// TestDemoPostgres runs tenure demo --scenario postgres,db-lock against
// the test database: exit 0, the stale transaction rolled back.
func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	url, _, _ := testPostgres(t)
	code, out, errs := fenceCLI("demo", "--scenario", "postgres,db-lock", "--postgres", url, "--ttl", "400ms", "--pause", "900ms")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"REJECTED: stale token, rolled back", "LOST UPDATE", "All 2 scenarios behaved as expected"} {
		if !strings.Contains(out, want) {
			t.Errorf("the timeline does not show %q:\n%s", want, out)
		}
	}
	// Without Postgres, the scenarios are skipped, not failed.
	code, out, errs = fenceCLI("demo", "--scenario", "postgres", "--postgres", "postgres://postgres@127.0.0.1:1/none")
	if code != exitOK || !strings.Contains(out, "skipped: Postgres does not answer") {
		t.Fatalf("without Postgres: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}
