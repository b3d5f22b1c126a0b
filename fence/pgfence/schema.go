package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Version is the version of the fence schema this package installs and
// works with. Install migrates an older schema to it; New refuses any
// other.
const Version = 1

// migrations[i] brings a schema from version i to version i+1. Each is SQL
// with {{schema}} standing for the quoted schema name, safe to run again (the
// objects it makes are created if missing or replaced).
var migrations = []string{
	// Version 1: the fence table and tenure_fence.
	`
CREATE TABLE IF NOT EXISTS {{schema}}.tenure_fences (
	resource   text PRIMARY KEY CHECK (resource <> ''),
	token      bigint NOT NULL CHECK (token > 0),
	updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE {{schema}}.tenure_fences IS
	'tenure fencing: the highest token accepted per resource (see tenure_fence)';

CREATE OR REPLACE FUNCTION {{schema}}.tenure_fence(resource text, token bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
	highest bigint;
BEGIN
	IF tenure_fence.resource IS NULL OR tenure_fence.resource = '' THEN
		RAISE EXCEPTION 'tenure_fence: empty resource name' USING ERRCODE = 'TF002';
	END IF;
	IF tenure_fence.token IS NULL OR tenure_fence.token < 1 THEN
		RAISE EXCEPTION 'tenure_fence: token % for % is not a grant''s token (tokens start at 1)',
			coalesce(tenure_fence.token::text, 'NULL'), quote_literal(tenure_fence.resource)
			USING ERRCODE = 'TF002';
	END IF;
	-- Lock the fence row. The lock is held until the calling transaction
	-- ends, which serialises fenced transactions on the same resource;
	-- under READ COMMITTED a waiter then reads the row as the lock holder
	-- committed it (under REPEATABLE READ and SERIALIZABLE it fails with a
	-- serialization failure instead, and is run again).
	SELECT f.token INTO highest FROM {{schema}}.tenure_fences AS f
		WHERE f.resource = tenure_fence.resource FOR UPDATE;
	IF NOT FOUND THEN
		-- The first fence of this resource; another transaction may be
		-- inserting it at the same time, hence ON CONFLICT.
		INSERT INTO {{schema}}.tenure_fences AS f (resource, token)
		VALUES (tenure_fence.resource, tenure_fence.token)
		ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = now()
			WHERE f.token <= excluded.token
		RETURNING f.token INTO highest;
		IF FOUND THEN
			RETURN highest;
		END IF;
		SELECT f.token INTO highest FROM {{schema}}.tenure_fences AS f WHERE f.resource = tenure_fence.resource;
		IF highest IS NULL THEN
			-- The row went away again (deleted by hand): run again.
			RAISE EXCEPTION 'tenure_fence: the fence of % changed under this transaction; run it again',
				quote_literal(tenure_fence.resource) USING ERRCODE = '40001';
		END IF;
	END IF;
	IF highest > tenure_fence.token THEN
		RAISE EXCEPTION USING ERRCODE = 'TF001',
			MESSAGE = format('tenure_fence: stale token %s for %L: a write with token %s was accepted',
				tenure_fence.token, tenure_fence.resource, highest),
			DETAIL = format('highest token: %s', highest),
			HINT = 'A newer holder of the lease has written; this transaction is rolled back.';
	END IF;
	IF highest < tenure_fence.token THEN
		-- A newer token: record it. The same token again (a holder's
		-- next write) needs only the lock.
		UPDATE {{schema}}.tenure_fences AS f SET token = tenure_fence.token, updated_at = now()
			WHERE f.resource = tenure_fence.resource;
		highest := tenure_fence.token;
	END IF;
	RETURN highest;
END
$fn$;
COMMENT ON FUNCTION {{schema}}.tenure_fence(text, bigint) IS
	'tenure fencing: call first in a transaction; raises SQLSTATE TF001 if token is lower than the highest accepted for resource, else records it';
`,
}

// Sentinels of the schema.
var (
	// ErrNotInstalled is returned by New, and by a fenced transaction,
	// when the schema has no fence installed.
	ErrNotInstalled = errors.New("pgfence: the fence is not installed")
	// ErrVersion is matched by the *VersionError that New returns when
	// the installed schema is older or newer than Version, and that
	// Install returns when it is newer.
	ErrVersion = errors.New("pgfence: fence schema version mismatch")
)

// VersionError says that the fence schema installed in Schema has another
// version than this package's. It matches ErrVersion.
type VersionError struct {
	Schema    string
	Installed int
	Want      int
}

func (e *VersionError) Error() string {
	if e.Installed > e.Want {
		return fmt.Sprintf("pgfence: the fence in schema %q has version %d, newer than version %d that this program knows; upgrade this program (nothing was changed)",
			e.Schema, e.Installed, e.Want)
	}
	return fmt.Sprintf("pgfence: the fence in schema %q has version %d, older than version %d that this program needs; run `tenure fence install --postgres URL` to migrate it (nothing was changed)",
		e.Schema, e.Installed, e.Want)
}

// Is reports whether target is ErrVersion.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// DB is what the fence needs of a database: *pgx.Conn and *pgxpool.Pool
// satisfy it.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

var (
	_ DB = (*pgx.Conn)(nil)
	_ DB = (*pgxpool.Pool)(nil)
)

// InstallResult says what Install did.
type InstallResult struct {
	// From is the version found: 0 when nothing was installed.
	From int
	// To is the version installed now (Version).
	To int
}

// Install installs the fence in schema (DefaultSchema if empty), or
// migrates an older one to Version, in one transaction: the fence table,
// the version table and the function tenure_fence. It is idempotent, and
// concurrent calls are serialised by an advisory lock. A schema of a newer
// version is left as it is, with a *VersionError.
func Install(ctx context.Context, db DB, schema string) (InstallResult, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	var res InstallResult
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		q := quote(schema)
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('tenure_fence install ' || $1::text))", schema); err != nil {
			return fmt.Errorf("take the install lock: %w", err)
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
			return fmt.Errorf("create schema %s: %w", q, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.tenure_fence_schema (
	one          boolean PRIMARY KEY DEFAULT true CHECK (one),
	version      integer NOT NULL,
	installed_at timestamptz NOT NULL DEFAULT now()
)`, q)); err != nil {
			return fmt.Errorf("create the version table: %w", err)
		}
		v, err := readVersion(ctx, tx, q)
		if err != nil && !errors.Is(err, ErrNotInstalled) {
			return err
		}
		res.From, res.To = v, Version
		if v > Version {
			return &VersionError{Schema: schema, Installed: v, Want: Version}
		}
		for i := v; i < Version; i++ {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(migrations[i], "{{schema}}", q)); err != nil {
				return fmt.Errorf("migrate to version %d: %w", i+1, err)
			}
		}
		_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.tenure_fence_schema (version) VALUES ($1)
ON CONFLICT (one) DO UPDATE SET version = excluded.version, installed_at = now()`, q), Version)
		return err
	})
	if ve, ok := errors.AsType[*VersionError](err); ok {
		return InstallResult{}, ve
	}
	if err != nil {
		return InstallResult{}, fmt.Errorf("pgfence: install in schema %q: %w", schema, err)
	}
	return res, nil
}

// readVersion returns the installed version in the quoted schema q:
// ErrNotInstalled if there is no version table or no row.
func readVersion(ctx context.Context, tx pgx.Tx, q string) (int, error) {
	var v int
	err := tx.QueryRow(ctx, fmt.Sprintf("SELECT version FROM %s.tenure_fence_schema", q)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotInstalled
	}
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && (pe.Code == "42P01" || pe.Code == "3F000") {
		// undefined_table, invalid_schema_name
		return 0, ErrNotInstalled
	}
	if err != nil {
		return 0, fmt.Errorf("read the fence schema version: %w", err)
	}
	return v, nil
}

// quote returns schema as a quoted SQL identifier.
func quote(schema string) string { return pgx.Identifier{schema}.Sanitize() }

// validSchema reports a schema name Postgres cannot take.
func validSchema(schema string) error {
	if strings.ContainsRune(schema, 0) {
		return fmt.Errorf("pgfence: schema name %q contains a NUL byte", schema)
	}
	return nil
}
