package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-io/tenure/fence/pgfence"
)

const fenceUsage = `Usage: tenure fence COMMAND ...

Commands of the storage guards:
  fence install --postgres URL [--schema S]   install or migrate tenure_fence

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
It needs no tenure cluster: --endpoints is ignored.`

func (a *app) fenceInstall(ctx context.Context, args []string) error {
	c := a.newCommand("fence install", "fence install --postgres URL [--schema S]", fenceInstallAbout)
	url := c.fs.String("postgres", "", "Postgres connection `URL`")
	schema := c.fs.String("schema", pgfence.DefaultSchema, "the `schema` to install in (created if missing)")
	if _, err := a.parse(c, args, nil, 0); err != nil {
		return err
	}
	if *url == "" {
		return &usageError{msg: "--postgres is required", usage: c.usage}
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
