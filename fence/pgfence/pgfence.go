package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-io/tenure/fence"
)

// SQLSTATEs that tenure_fence raises.
const (
	// StaleSQLState is raised by tenure_fence when the token is lower than
	// the highest accepted for the resource. The error's DETAIL is
	// "highest token: N".
	StaleSQLState = "TF001"
	// InvalidSQLState is raised by tenure_fence for an empty resource or a
	// token below 1.
	InvalidSQLState = "TF002"
)

// DefaultSchema is the schema the fence is installed in by default.
// Installed there, `SELECT tenure_fence(...)` works unqualified with the
// default search_path.
const DefaultSchema = "public"

// ErrSerialization is matched by the error of a fenced transaction that
// Postgres aborted with a serialization failure (SQLSTATE 40001) or a
// deadlock (40P01) more times than Config.Retries allowed. It is not a
// stale token: run the transaction again.
var ErrSerialization = errors.New("pgfence: serialization failure")

// Config configures a Fence. Start from DefaultConfig.
type Config struct {
	// Schema is the Postgres schema that holds the fence (the table
	// tenure_fences and the function tenure_fence). Default (also when
	// empty) DefaultSchema, "public".
	Schema string
	// IsoLevel is the isolation level of the transactions InTx begins.
	// Default (also when empty) pgx.ReadCommitted; pgx.RepeatableRead
	// and pgx.Serializable work too (see Retries).
	IsoLevel pgx.TxIsoLevel
	// Retries is how many times InTx runs a transaction again, with fn,
	// after Postgres aborted it with a serialization failure or a
	// deadlock. Under REPEATABLE READ and SERIALIZABLE, a fenced
	// transaction that waited for another one on the same resource to
	// commit fails that way (the fence row changed after its snapshot).
	// Default 3 (4 runs in all); 0 runs a transaction once.
	Retries int
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{Schema: DefaultSchema, IsoLevel: pgx.ReadCommitted, Retries: 3}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Schema == "":
		return errors.New("pgfence: Config.Schema is empty")
	case c.Retries < 0:
		return fmt.Errorf("pgfence: Config.Retries is negative (%d)", c.Retries)
	}
	switch c.IsoLevel {
	case pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable:
	default:
		return fmt.Errorf("pgfence: Config.IsoLevel %q is not read committed, repeatable read or serializable", c.IsoLevel)
	}
	return validSchema(c.Schema)
}

// Fence runs fenced transactions on a database whose fence is installed.
// It is safe for concurrent use if its DB is (a *pgxpool.Pool is, a
// *pgx.Conn is not).
type Fence struct {
	db   DB
	cfg  Config
	fn   string // schema.tenure_fence
	call string // SELECT schema.tenure_fence($1, $2)
}

// New returns a Fence on db. It checks that the fence installed in
// cfg.Schema has this package's Version: ErrNotInstalled if there is none,
// a *VersionError if it is older or newer.
func New(ctx context.Context, db DB, cfg Config) (*Fence, error) {
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.IsoLevel == "" {
		cfg.IsoLevel = pgx.ReadCommitted
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := quote(cfg.Schema)
	var v int
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		v, err = readVersion(ctx, tx, q)
		return err
	})
	if errors.Is(err, ErrNotInstalled) {
		return nil, fmt.Errorf("%w in schema %q: run `tenure fence install --postgres URL` (or pgfence.Install)", ErrNotInstalled, cfg.Schema)
	}
	if err != nil {
		return nil, fmt.Errorf("pgfence: %w", err)
	}
	if v != Version {
		return nil, &VersionError{Schema: cfg.Schema, Installed: v, Want: Version}
	}
	fn := q + ".tenure_fence"
	return &Fence{db: db, cfg: cfg, fn: fn, call: "SELECT " + fn + "($1, $2)"}, nil
}

// InTx runs fn in a transaction fenced by l: the transaction's first
// statement is tenure_fence(l.Name(), l.Token()), then fn runs, then the
// transaction commits. If the token is stale, nothing of fn runs and the
// error is a *fence.StaleError (errors.Is(err, fence.ErrStale)). If fn
// fails, or the commit does, everything is rolled back and the error
// returned. Commit happens only if both the fence and fn passed.
//
// With a *pgxpool.Pool or a *pgx.Conn, BEGIN and the fence go to the
// server in one round trip, so the guard costs the transaction one
// statement, not one round trip more.
//
// The fence's row lock is held until the transaction ends, so fenced
// transactions on one resource run one after another, and a write
// commits only while its token is the highest accepted. A transaction
// aborted with a serialization failure is run again, fn included, up to
// Config.Retries times: fn must not have effects outside the transaction
// that a second run would repeat.
func (f *Fence) InTx(ctx context.Context, l fence.Lease, fn func(ctx context.Context, tx pgx.Tx) error) error {
	resource, token := l.Name(), l.Token()
	if err := fence.CheckInt64(resource, token); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := f.runOnce(ctx, resource, token, fn)
		if err == nil {
			return nil
		}
		if !retryable(err) {
			return err
		}
		if attempt >= f.cfg.Retries || ctx.Err() != nil {
			return fmt.Errorf("%w (after %d runs): %w", ErrSerialization, attempt+1, err)
		}
	}
}

func (f *Fence) runOnce(ctx context.Context, resource string, token uint64, fn func(context.Context, pgx.Tx) error) error {
	var tx pgx.Tx
	var err error
	switch db := f.db.(type) {
	case *pgxpool.Pool:
		conn, aerr := db.Acquire(ctx)
		if aerr != nil {
			return fmt.Errorf("pgfence: %w", aerr)
		}
		defer conn.Release()
		tx, err = f.beginFenced(ctx, conn.Conn(), resource, token)
	case *pgx.Conn:
		tx, err = f.beginFenced(ctx, db, resource, token)
	default:
		tx, err = f.beginThenFence(ctx, db, resource, token)
	}
	if err != nil {
		return err
	}
	// Rollback after a commit is a no-op; after an error it ends the
	// transaction. Its own error adds nothing.
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgfence: commit: %w", err)
	}
	return nil
}

// beginFenced begins a transaction on conn whose first statement is the
// fence, sending both in one round trip (one simple-protocol query,
// "BEGIN ...; SELECT tenure_fence(...)"). A fence that fails leaves no
// transaction open.
func (f *Fence) beginFenced(ctx context.Context, conn *pgx.Conn, resource string, token uint64) (pgx.Tx, error) {
	lit, ok := literal(conn, resource)
	if !ok {
		return f.beginThenFence(ctx, conn, resource, token)
	}
	q := "BEGIN ISOLATION LEVEL " + string(f.cfg.IsoLevel) + "; SELECT " + f.fn + "(" + lit + ", " + strconv.FormatUint(token, 10) + ")"
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: q})
	if err != nil {
		if !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return nil, fenceError(err, resource, token, f.cfg.Schema)
	}
	return tx, nil
}

// beginThenFence begins a transaction on db and runs the fence in it: two
// round trips, for DBs other than a pool or a connection.
func (f *Fence) beginThenFence(ctx context.Context, db DB, resource string, token uint64) (pgx.Tx, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: f.cfg.IsoLevel})
	if err != nil {
		return nil, fmt.Errorf("pgfence: begin: %w", err)
	}
	if _, err := tx.Exec(ctx, f.call, resource, int64(token)); err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, fenceError(err, resource, token, f.cfg.Schema)
	}
	return tx, nil
}

// literal returns s as a SQL string literal for conn, if conn's server
// reads standard strings (backslashes are not escapes) and s can be one.
func literal(conn *pgx.Conn, s string) (string, bool) {
	if conn.PgConn().ParameterStatus("standard_conforming_strings") != "on" || strings.ContainsRune(s, 0) {
		return "", false
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'", true
}

// ReadModifyWrite runs a read-modify-write as one fenced transaction:
// the fence first, then read, then write with what read returned, then
// the commit. A late holder's write can then neither land between the
// read and the write (it waits for the fence row's lock, and is refused
// once this transaction has committed a newer token) nor be missed by
// the read (under READ COMMITTED, the default, the read comes after the
// fence and sees every transaction committed before it). Reading in a
// transaction of its own leaves that window open: see docs/fencing.md.
// Errors and retries are InTx's.
//
// Under REPEATABLE READ the snapshot is taken at the fence, before it
// may wait for the fence row: when the holder it waited for had the same
// token as before (it only locked the row), the read can miss that
// holder's last write. Postgres then refuses this transaction's write
// to the same rows (a serialization failure, run again); a read of
// other rows than those written should use SELECT ... FOR SHARE or
// SERIALIZABLE.
func ReadModifyWrite[T any](ctx context.Context, f *Fence, l fence.Lease,
	read func(ctx context.Context, tx pgx.Tx) (T, error),
	write func(ctx context.Context, tx pgx.Tx, v T) error) error {
	return f.InTx(ctx, l, func(ctx context.Context, tx pgx.Tx) error {
		v, err := read(ctx, tx)
		if err != nil {
			return err
		}
		return write(ctx, tx, v)
	})
}

// Check runs tenure_fence(l.Name(), l.Token()) in tx, a transaction of
// the caller's: call it before the transaction's writes. Its error is a
// *fence.StaleError for a stale token; tx is then aborted, and must be
// rolled back.
func (f *Fence) Check(ctx context.Context, tx pgx.Tx, l fence.Lease) error {
	resource, token := l.Name(), l.Token()
	if err := fence.CheckInt64(resource, token); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, f.call, resource, int64(token)); err != nil {
		return fenceError(err, resource, token, f.cfg.Schema)
	}
	return nil
}

// Advance runs the fence alone in a transaction of its own: it records
// token for resource if it is not lower than the highest accepted, and
// returns a *fence.StaleError otherwise. It fences nothing else; it is the
// check of an HTTP service's fence kept in Postgres (see httpfence).
func (f *Fence) Advance(ctx context.Context, resource string, token uint64) error {
	return f.InTx(ctx, fence.Grant(resource, token), func(context.Context, pgx.Tx) error { return nil })
}

// Highest returns the highest token accepted for resource, 0 for none.
func (f *Fence) Highest(ctx context.Context, resource string) (uint64, error) {
	var h int64
	err := pgx.BeginTxFunc(ctx, f.db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT token FROM "+quote(f.cfg.Schema)+".tenure_fences WHERE resource = $1", resource).Scan(&h)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgfence: read the fence of %q: %w", resource, err)
	}
	return uint64(h), nil
}

// fenceError maps an error of tenure_fence to the fence package's errors.
func fenceError(err error, resource string, token uint64, schema string) error {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return fmt.Errorf("pgfence: fence %q: %w", resource, err)
	}
	switch pe.Code {
	case StaleSQLState:
		return &fence.StaleError{Resource: resource, Token: token, Highest: parseHighest(pe.Detail)}
	case InvalidSQLState:
		return fence.Invalid("%s", strings.TrimPrefix(pe.Message, "tenure_fence: "))
	case "42883", "42P01", "3F000": // undefined_function, undefined_table, invalid_schema_name
		return fmt.Errorf("%w in schema %q: %w", ErrNotInstalled, schema, err)
	}
	return fmt.Errorf("pgfence: fence %q: %w", resource, err)
}

// parseHighest reads N from the DETAIL "highest token: N" of a stale
// error; 0 if it is not there.
func parseHighest(detail string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimPrefix(detail, "highest token: "), 10, 64)
	return n
}

// retryable reports a serialization failure or a deadlock: the
// transaction may succeed if run again.
func retryable(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pe.Code == "40001" || pe.Code == "40P01")
}

// IsSerializationFailure reports whether err is a serialization failure
// or a deadlock (SQLSTATE 40001, 40P01), for callers that run their own
// fenced transactions: such a transaction is not stale, it should be run
// again.
func IsSerializationFailure(err error) bool {
	return retryable(err) || errors.Is(err, ErrSerialization)
}
