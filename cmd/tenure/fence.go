package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/tenure-io/tenure/fence/mysqlfence"
	"github.com/tenure-io/tenure/fence/pgfence"
)

const fenceUsage = `Usage: tenure fence COMMAND ...

Commands of the storage guards:
  fence install --postgres URL [--schema S]   install or migrate tenure_fence
  fence install --mysql DSN                   the same in MySQL or MariaDB

See docs/fencing.md.
`

func (a *app) fence(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "fence: no command given", usage: fenceUsage}
	}
	switch args[0] {
	case "install":
		return a.fenceInstall(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: fenceUsage}
	}
	return &usageError{msg: fmt.Sprintf("fence: unknown command %q", args[0]), usage: fenceUsage}
}

const fenceInstallAbout = `Installs the Postgres fence in schema S of the database at URL, or migrates
an older one to this version, in one transaction: the table tenure_fences,
the table tenure_fence_schema (the version) and the function
tenure_fence(resource text, token bigint). Running it again changes nothing.
A fence of a newer version is left as it is (exit 1).

Then fence a transaction, from any language, with its first statement:

  BEGIN;
  SELECT tenure_fence('jobs/nightly', 42);  -- SQLSTATE TF001 if 42 is stale
  ...
  COMMIT;

URL is a libpq connection string or URL (postgres://user@host:5432/db).

With --mysql, installs the same fence in the DSN's database of a MySQL or
MariaDB server: the tables tenure_fences and tenure_fence_schema and the
procedure tenure_fence(resource, token), called first in a transaction:

  START TRANSACTION;
  CALL tenure_fence('jobs/nightly', 42);    -- SQLSTATE TF001 if 42 is stale
  ...
  COMMIT;                                   -- ROLLBACK on any error

DSN is a DSN of the Go MySQL driver: user:password@tcp(host:3306)/database.

It needs no tenure cluster: --endpoints is ignored.`

func (a *app) fenceInstall(ctx context.Context, args []string) error {
	c := a.newCommand("fence install", "fence install --postgres URL [--schema S] | --mysql DSN", fenceInstallAbout)
	url := c.fs.String("postgres", "", "Postgres connection `URL`")
	schema := c.fs.String("schema", pgfence.DefaultSchema, "the Postgres `schema` to install in (created if missing)")
	dsn := c.fs.String("mysql", "", "MySQL or MariaDB `DSN` (user:password@tcp(host:3306)/database)")
	if _, err := a.parse(c, args, nil, 0); err != nil {
		return err
	}
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["postgres"] && set["mysql"]:
		return &usageError{msg: "--postgres and --mysql: give one", usage: c.usage}
	case set["mysql"] && set["schema"]:
		return &usageError{msg: "--schema is for --postgres; with --mysql, name the database in the DSN", usage: c.usage}
	case set["mysql"]:
		return a.fenceInstallMySQL(ctx, c, *dsn)
	case *url == "":
		return &usageError{msg: "--postgres or --mysql is required", usage: c.usage}
	}
	if *schema == "" {
		return &usageError{msg: "--schema is empty", usage: c.usage}
	}
	cfg, err := pgx.ParseConfig(*url)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("--postgres: %v", err), usage: c.usage}
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > a.g.requestTimeout {
		cfg.ConnectTimeout = a.g.requestTimeout
	}
	ctx, cancel := a.withTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("fence install: connect to Postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pgfence.Install(ctx, conn, *schema)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("tenure_fence version %d installed in schema %s", res.To, *schema)
	switch {
	case res.From == res.To:
		text = fmt.Sprintf("tenure_fence version %d is already installed in schema %s; nothing changed", res.To, *schema)
	case res.From > 0:
		text = fmt.Sprintf("tenure_fence migrated from version %d to %d in schema %s", res.From, res.To, *schema)
	}
	a.out().print(struct {
		Schema string `json:"schema"`
		From   int    `json:"from"`
		To     int    `json:"to"`
	}{*schema, res.From, res.To}, text)
	return nil
}

// fenceInstallMySQL installs the MySQL fence in the database of dsn.
func (a *app) fenceInstallMySQL(ctx context.Context, c *command, dsn string) error {
	if dsn == "" {
		return &usageError{msg: "--mysql is empty", usage: c.usage}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("--mysql: %v (want user:password@tcp(host:3306)/database)", err), usage: c.usage}
	}
	if cfg.DBName == "" {
		return &usageError{msg: "--mysql: the DSN names no database (user:password@tcp(host:3306)/database)", usage: c.usage}
	}
	if cfg.Timeout == 0 || cfg.Timeout > a.g.requestTimeout {
		cfg.Timeout = a.g.requestTimeout
	}
	ctx, cancel := a.withTimeout(ctx, 30*time.Second)
	defer cancel()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("--mysql: %v", err), usage: c.usage}
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("fence install: connect to MySQL at %s: %w", cfg.Addr, err)
	}
	res, err := mysqlfence.Install(ctx, db, cfg.DBName)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("tenure_fence version %d installed in database %s", res.To, res.Database)
	switch {
	case res.From == res.To:
		text = fmt.Sprintf("tenure_fence version %d is already installed in database %s; nothing changed", res.To, res.Database)
	case res.From > 0:
		text = fmt.Sprintf("tenure_fence migrated from version %d to %d in database %s", res.From, res.To, res.Database)
	}
	a.out().print(struct {
		Database string `json:"database"`
		From     int    `json:"from"`
		To       int    `json:"to"`
	}{res.Database, res.From, res.To}, text)
	return nil
}
