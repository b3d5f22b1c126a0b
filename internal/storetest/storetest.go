// Package storetest gives tests the Postgres, MySQL (MariaDB) and Redis
// servers they run against: where they are, and a schema, a database or a
// key prefix of a test's own, removed when the test ends. It is test support: only _test.go files
// import it.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// PostgresURL is the database the tests use: $TENURE_TEST_POSTGRES, or
// the one .ci/run starts.
func PostgresURL() string {
	if u := os.Getenv("TENURE_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// MySQLDSN is the MySQL or MariaDB server the tests use, as a DSN of
// github.com/go-sql-driver/mysql: $TENURE_TEST_MYSQL, or the MariaDB
// that .ci/run starts.
func MySQLDSN() string {
	if d := os.Getenv("TENURE_TEST_MYSQL"); d != "" {
		return d
	}
	return "root@tcp(127.0.0.1:3306)/test"
}

// MySQL creates a database of tb's own and returns its name and the DSN
// of MySQLDSN with that database; it is dropped, with all it holds, when
// tb ends. It fails tb, saying what to start, when the server does not
// answer.
func MySQL(tb testing.TB) (database, dsn string) {
	tb.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		tb.Fatalf("TENURE_TEST_MYSQL: %v", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	database = Name("tenure_test_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+database); err != nil {
		tb.Fatalf("MySQL is not reachable at %s: %v\nStart it (.ci/run does: start-stop-daemon --start --background --exec /usr/sbin/mariadbd) or set TENURE_TEST_MYSQL to a DSN (user@tcp(host:3306)/db).", MySQLDSN(), err)
	}
	tb.Cleanup(func() {
		admin, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			tb.Errorf("drop database %s: %v", database, err)
			return
		}
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+database); err != nil {
			tb.Errorf("drop database %s: %v", database, err)
		}
	})
	cfg.DBName = database
	return database, cfg.FormatDSN()
}

// MySQLDB returns a pool on dsn, closed when tb ends.
func MySQLDB(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// RedisAddr is the Redis server the tests use: $TENURE_TEST_REDIS, or
// the one .ci/run starts.
func RedisAddr() string {
	if a := os.Getenv("TENURE_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Name returns prefix followed by 12 random lower-case letters and
// digits: a schema or key prefix no other test has.
func Name(prefix string) string {
	return prefix + strings.ToLower(rand.Text()[:12])
}

// Schema creates a schema of tb's own and returns its name; it is
// dropped, with all it holds, when tb ends. It fails tb, saying what to
// start, when Postgres does not answer.
func Schema(tb testing.TB) string {
	tb.Helper()
	schema := Name("tenure_test_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		tb.Fatalf("Postgres is not reachable at %s: %v\nStart it (.ci/run does: pg_ctlcluster 15 main start) or set TENURE_TEST_POSTGRES to a database URL.", PostgresURL(), err)
	}
	defer admin.Close(ctx)
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+q+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// Pool returns a pool on the test database whose connections have schema
// as their search_path, after opts changed its configuration; it is
// closed when tb ends.
func Pool(tb testing.TB, schema string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Redis returns a client of the test Redis server and a key prefix of
// tb's own, ending in ":"; when tb ends, every key under the prefix is
// deleted and the client closed. It fails tb, saying what to start, when
// Redis does not answer.
func Redis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr(), PoolSize: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		tb.Fatalf("Redis is not reachable at %s: %v\nStart it (.ci/run does: redis-server --daemonize yes --port 6379) or set TENURE_TEST_REDIS to host:port.", RedisAddr(), err)
	}
	prefix := Name("tenure-test:") + ":"
	tb.Cleanup(func() {
		defer rdb.Close()
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			tb.Errorf("list the test's keys: %v", err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("delete the test's keys: %v", err)
			}
		}
	})
	return rdb, prefix
}
