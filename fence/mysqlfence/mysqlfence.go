package mysqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/tenure-io/tenure/fence"
)

// SQLSTATEs that tenure_fence signals (with MySQL error number 1644,
// ER_SIGNAL_EXCEPTION).
const (
	// StaleSQLState is signalled by tenure_fence when the token is lower
	// than the highest accepted for the resource. The message ends with
	// "a write with token N was accepted".
	StaleSQLState = "TF001"
	// InvalidSQLState is signalled by tenure_fence for an empty resource,
	// a resource longer than MaxResourceLen bytes, or a token below 1.
	InvalidSQLState = "TF002"
)

// ErrDeadlock is matched by the error of a fenced transaction that
// MySQL rolled back as a deadlock victim (error 1213, SQLSTATE 40001)
// more times than Config.Retries allowed. It is not a stale token: run
// the transaction again.
var ErrDeadlock = errors.New("mysqlfence: deadlock")

// Config configures a Fence. Start from DefaultConfig.
type Config struct {
	// Database is the database that holds the fence (the table
	// tenure_fences and the procedure tenure_fence). Default (also when
	// empty) the connection's current database: the DSN's.
	Database string
	// Isolation is the isolation level of the transactions InTx begins.
	// Default sql.LevelDefault, the server's (REPEATABLE READ unless
	// configured otherwise); sql.LevelReadCommitted,
	// sql.LevelRepeatableRead and sql.LevelSerializable work too. The
	// fence reads its row with a locking read, as committed last, at
	// every level.
	Isolation sql.IsolationLevel
	// Retries is how many times InTx runs a transaction again, with fn,
	// after MySQL rolled it back as a deadlock victim. Default 3 (4 runs
	// in all); 0 runs a transaction once.
	Retries int
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config { return Config{Isolation: sql.LevelDefault, Retries: 3} }

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Retries < 0 {
		return fmt.Errorf("mysqlfence: Config.Retries is negative (%d)", c.Retries)
	}
	switch c.Isolation {
	case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
	default:
		return fmt.Errorf("mysqlfence: Config.Isolation %s is not the default, read committed, repeatable read or serializable", c.Isolation)
	}
	if strings.ContainsRune(c.Database, 0) {
		return fmt.Errorf("mysqlfence: database name %q contains a NUL byte", c.Database)
	}
	return nil
}

// Fence runs fenced transactions on a database whose fence is
// installed. It is safe for concurrent use.
type Fence struct {
	db  *sql.DB
	cfg Config
	// fn is the procedure, qualified when Config.Database is set; table
	// the fence table likewise.
	fn, table string
}

// New returns a Fence on db. It checks that the fence installed in
// cfg.Database has this package's Version: ErrNotInstalled if there is
// none, a *VersionError if it is older or newer.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Fence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prefix, name := "", cfg.Database
	if cfg.Database != "" {
		prefix = quote(cfg.Database) + "."
	} else if err := db.QueryRowContext(ctx, "SELECT COALESCE(DATABASE(), '')").Scan(&name); err != nil {
		return nil, fmt.Errorf("mysqlfence: %w", err)
	}
	if name == "" {
		return nil, errors.New("mysqlfence: no database selected; name one in the DSN or in Config.Database")
	}
	v, err := readVersion(ctx, db, quote(name))
	if errors.Is(err, ErrNotInstalled) {
		return nil, fmt.Errorf("%w in database %q: run `tenure fence install --mysql DSN` (or mysqlfence.Install)", ErrNotInstalled, name)
	}
	if err != nil {
		return nil, fmt.Errorf("mysqlfence: %w", err)
	}
	if v != Version {
		return nil, &VersionError{Database: name, Installed: v, Want: Version}
	}
	return &Fence{db: db, cfg: cfg, fn: prefix + "tenure_fence", table: prefix + "tenure_fences"}, nil
}

// check validates a fence's resource and token before the database is
// touched.
func check(l fence.Lease) (string, uint64, error) {
	resource, token := l.Name(), l.Token()
	if err := fence.Check(resource, token); err != nil {
		return "", 0, err
	}
	if len(resource) > MaxResourceLen {
		return "", 0, fence.Invalid("resource name of %d bytes is longer than %d", len(resource), MaxResourceLen)
	}
	return resource, token, nil
}

// call is the statement that fences resource with token. The resource
// goes as a hex literal and the token as a number, so the statement
// needs no escaping and no prepared statement (one round trip).
func (f *Fence) call(resource string, token uint64) string {
	return fmt.Sprintf("CALL %s(X'%x', %d)", f.fn, resource, token)
}

// InTx runs fn in a transaction fenced by l: the transaction's first
// statement is CALL tenure_fence(l.Name(), l.Token()), then fn runs,
// then the transaction commits. If the token is stale, nothing of fn
// runs, the transaction is rolled back and the error is a
// *fence.StaleError (errors.Is(err, fence.ErrStale)). If fn fails, or
// the commit does, everything is rolled back and the error returned.
//
// The fence's row lock is held until the transaction ends, so fenced
// transactions on one resource run one after another, and a write
// commits only while its token is the highest accepted. Reads in fn see
// every write committed before the fence: read what you will write from
// inside fn (see ReadModifyWrite). A transaction rolled back as a
// deadlock victim is run again, fn included, up to Config.Retries times:
// fn must not have effects outside the transaction that a second run
// would repeat.
func (f *Fence) InTx(ctx context.Context, l fence.Lease, fn func(ctx context.Context, tx *sql.Tx) error) error {
	resource, token, err := check(l)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := f.runOnce(ctx, resource, token, fn)
		if err == nil {
			return nil
		}
		if !isDeadlock(err) {
			return err
		}
		if attempt >= f.cfg.Retries || ctx.Err() != nil {
			return fmt.Errorf("%w (after %d runs): %w", ErrDeadlock, attempt+1, err)
		}
	}
}

func (f *Fence) runOnce(ctx context.Context, resource string, token uint64, fn func(context.Context, *sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, &sql.TxOptions{Isolation: f.cfg.Isolation})
	if err != nil {
		return fmt.Errorf("mysqlfence: begin: %w", err)
	}
	// Rollback after a commit is a no-op; after an error it ends the
	// transaction (MySQL ends only the failed statement). Its own error
	// adds nothing.
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, f.call(resource, token)); err != nil {
		return f.fenceError(err, resource, token)
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mysqlfence: commit: %w", err)
	}
	return nil
}

// Check runs tenure_fence(l.Name(), l.Token()) in tx, a transaction of
// the caller's: call it before the transaction's reads and writes. Its
// error is a *fence.StaleError for a stale token; MySQL then ends only
// the CALL, not the transaction: roll tx back.
func (f *Fence) Check(ctx context.Context, tx *sql.Tx, l fence.Lease) error {
	resource, token, err := check(l)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, f.call(resource, token)); err != nil {
		return f.fenceError(err, resource, token)
	}
	return nil
}

// Advance runs the fence alone in a transaction of its own: it records
// token for resource if it is not lower than the highest accepted, and
// returns a *fence.StaleError otherwise. It fences nothing else; it is the
// check of an HTTP service's fence kept in MySQL (see httpfence).
func (f *Fence) Advance(ctx context.Context, resource string, token uint64) error {
	return f.InTx(ctx, fence.Grant(resource, token), func(context.Context, *sql.Tx) error { return nil })
}

// Highest returns the highest token accepted for resource, 0 for none.
func (f *Fence) Highest(ctx context.Context, resource string) (uint64, error) {
	var h uint64
	err := f.db.QueryRowContext(ctx, "SELECT token FROM "+f.table+" WHERE resource = ?", []byte(resource)).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("mysqlfence: read the fence of %q: %w", resource, err)
	}
	return h, nil
}

// ReadModifyWrite runs a read-modify-write as one fenced transaction:
// the fence first, then read, then write with what read returned, then
// the commit. A late holder's write can then neither land between the
// read and the write (it waits for the fence's row lock, and is refused
// once this transaction has committed a newer token) nor be missed by
// the read (it committed before the fence, and the read comes after).
// Reading in a transaction of its own, or before the fence, leaves that
// window open: see docs/fencing.md. Errors and retries are InTx's.
func ReadModifyWrite[T any](ctx context.Context, f *Fence, l fence.Lease,
	read func(ctx context.Context, tx *sql.Tx) (T, error),
	write func(ctx context.Context, tx *sql.Tx, v T) error) error {
	return f.InTx(ctx, l, func(ctx context.Context, tx *sql.Tx) error {
		v, err := read(ctx, tx)
		if err != nil {
			return err
		}
		return write(ctx, tx, v)
	})
}

// fenceError maps an error of tenure_fence to the fence package's errors.
func (f *Fence) fenceError(err error, resource string, token uint64) error {
	me, ok := errors.AsType[*mysql.MySQLError](err)
	if !ok {
		return fmt.Errorf("mysqlfence: fence %q: %w", resource, err)
	}
	switch string(me.SQLState[:]) {
	case StaleSQLState:
		return &fence.StaleError{Resource: resource, Token: token, Highest: parseHighest(me.Message)}
	case InvalidSQLState:
		return fence.Invalid("%s", strings.TrimPrefix(me.Message, "tenure_fence: "))
	}
	switch me.Number {
	case 1305, 1146, 1049: // ER_SP_DOES_NOT_EXIST, ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR
		return fmt.Errorf("%w: %w", ErrNotInstalled, err)
	case 1213: // ER_LOCK_DEADLOCK: kept as it is for InTx to retry
		return err
	}
	return fmt.Errorf("mysqlfence: fence %q: %w", resource, err)
}

// parseHighest reads N from a stale error's message, which ends with
// "a write with token N was accepted"; 0 if it is not there.
func parseHighest(msg string) uint64 {
	msg, ok := strings.CutSuffix(msg, " was accepted")
	if !ok {
		return 0
	}
	i := strings.LastIndex(msg, " ")
	n, _ := strconv.ParseUint(msg[i+1:], 10, 64)
	return n
}

// isDeadlock reports a deadlock (error 1213): MySQL rolled the whole
// transaction back, and it may succeed if run again.
func isDeadlock(err error) bool {
	me, ok := errors.AsType[*mysql.MySQLError](err)
	return ok && me.Number == 1213
}

// IsDeadlock reports whether err is a deadlock (MySQL error 1213,
// SQLSTATE 40001), for callers that run their own fenced transactions:
// such a transaction is not stale, MySQL rolled it back whole, and it
// should be run again.
func IsDeadlock(err error) bool { return isDeadlock(err) || errors.Is(err, ErrDeadlock) }
