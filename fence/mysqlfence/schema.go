package mysqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Version is the version of the fence schema this package installs and
// works with. Install migrates an older schema to it; New refuses any
// other.
const Version = 1

// MaxResourceLen is the longest resource name the fence takes, in bytes.
const MaxResourceLen = 1024

// migrations[i] brings a database from version i to version i+1: SQL
// statements run one by one (MySQL runs DDL outside transactions), each
// safe to run again, so that an install cut short is completed by the
// next. {{db}} stands for the quoted database name. Inside the
// procedure, unqualified names are the procedure's database's.
var migrations = [][]string{
	// Version 1: the fence table and the procedure tenure_fence.
	{
		// resource is VARBINARY: names compare byte for byte, as tenure
		// compares them (a _bin collation would still ignore trailing
		// spaces). InnoDB: the fence needs row locks and transactions.
		`CREATE TABLE IF NOT EXISTS {{db}}.tenure_fences (
	resource   VARBINARY(1024) NOT NULL PRIMARY KEY,
	token      BIGINT UNSIGNED NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB COMMENT='tenure fencing: the highest token accepted per resource (see tenure_fence)'`,
		`DROP PROCEDURE IF EXISTS {{db}}.tenure_fence`,
		// A procedure, not a function: MySQL with binary logging (MySQL
		// 8's default) refuses a function that writes unless the
		// installer has SUPER or log_bin_trust_function_creators is on;
		// a procedure needs neither.
		//
		// The row lock: INSERT ... ON DUPLICATE KEY UPDATE takes an
		// exclusive lock on the resource's primary-key record whether it
		// inserts the row or finds it, and takes no gap lock for it. (The
		// other order, a SELECT ... FOR UPDATE first and an INSERT when
		// it finds nothing, takes a gap lock on a missing row under
		// REPEATABLE READ; two first fences of one resource then each
		// wait for the other's gap lock to insert: a deadlock.) The
		// SELECT ... FOR UPDATE that follows reads the row under the lock
		// already held, as committed last, whatever the isolation level.
		// The lock is held until the calling transaction ends, so fenced
		// transactions on one resource run one after another.
		`CREATE PROCEDURE {{db}}.tenure_fence(IN p_resource BLOB, IN p_token DECIMAL(20,0))
MODIFIES SQL DATA
COMMENT 'tenure fencing: call first in a transaction; SQLSTATE TF001 if p_token is lower than the highest accepted for p_resource, else records it'
BEGIN
	DECLARE v_highest BIGINT UNSIGNED;
	DECLARE v_name TEXT CHARACTER SET utf8mb4;
	DECLARE v_room INT;
	IF p_resource IS NULL OR LENGTH(p_resource) = 0 THEN
		SIGNAL SQLSTATE 'TF002' SET MESSAGE_TEXT = 'tenure_fence: empty resource name';
	END IF;
	IF LENGTH(p_resource) > 1024 THEN
		SIGNAL SQLSTATE 'TF002' SET MESSAGE_TEXT = 'tenure_fence: resource name longer than 1024 bytes';
	END IF;
	IF p_token IS NULL OR p_token < 1 OR p_token > 18446744073709551615 THEN
		SET v_name = CONCAT('tenure_fence: token ', COALESCE(p_token, 'NULL'), ' is not a grant''s token (tokens start at 1)');
		SIGNAL SQLSTATE 'TF002' SET MESSAGE_TEXT = v_name;
	END IF;
	INSERT INTO tenure_fences (resource, token) VALUES (p_resource, p_token)
		ON DUPLICATE KEY UPDATE
			updated_at = IF(token < p_token, CURRENT_TIMESTAMP(6), updated_at),
			token = GREATEST(token, p_token);
	SELECT token INTO v_highest FROM tenure_fences WHERE resource = p_resource FOR UPDATE;
	IF v_highest > p_token THEN
		-- MySQL keeps 128 characters of a MESSAGE_TEXT: shorten the name
		-- to fit, never the tokens.
		SET v_room = 128 - CHAR_LENGTH(CONCAT('tenure_fence: stale token ', p_token,
			' for '''': a write with token ', v_highest, ' was accepted'));
		SET v_name = CONVERT(p_resource USING utf8mb4);
		IF CHAR_LENGTH(v_name) > v_room THEN
			SET v_name = CONCAT(LEFT(v_name, GREATEST(v_room - 3, 0)), '...');
		END IF;
		SET v_name = CONCAT('tenure_fence: stale token ', p_token, ' for ''', v_name,
			''': a write with token ', v_highest, ' was accepted');
		SIGNAL SQLSTATE 'TF001' SET MESSAGE_TEXT = v_name;
	END IF;
END`,
	},
}

// Sentinels of the schema.
var (
	// ErrNotInstalled is returned by New, and by a fenced transaction,
	// when the database has no fence installed.
	ErrNotInstalled = errors.New("mysqlfence: the fence is not installed")
	// ErrVersion is matched by the *VersionError that New returns when
	// the installed schema is older or newer than Version, and that
	// Install returns when it is newer.
	ErrVersion = errors.New("mysqlfence: fence schema version mismatch")
)

// VersionError says that the fence installed in Database has another
// version than this package's. It matches ErrVersion.
type VersionError struct {
	Database  string
	Installed int
	Want      int
}

func (e *VersionError) Error() string {
	if e.Installed > e.Want {
		return fmt.Sprintf("mysqlfence: the fence in database %q has version %d, newer than version %d that this program knows; upgrade this program (nothing was changed)",
			e.Database, e.Installed, e.Want)
	}
	return fmt.Sprintf("mysqlfence: the fence in database %q has version %d, older than version %d that this program needs; run `tenure fence install --mysql DSN` to migrate it (nothing was changed)",
		e.Database, e.Installed, e.Want)
}

// Is reports whether target is ErrVersion.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// InstallResult says what Install did.
type InstallResult struct {
	// Database is the database the fence is installed in.
	Database string
	// From is the version found: 0 when nothing was installed.
	From int
	// To is the version installed now (Version).
	To int
}

// installLockWait is how long Install waits for a concurrent installer.
const installLockWait = 30 * time.Second

// Install installs the fence in database (the connection's current
// database, the DSN's, if empty), or migrates an older one to Version:
// the table tenure_fences, the table tenure_fence_schema (the version)
// and the procedure tenure_fence. It is idempotent, and concurrent calls
// are serialised by a named lock (GET_LOCK). MySQL runs DDL outside
// transactions: an install cut short leaves some objects made and the
// version not recorded, and running it again completes it. A fence of a
// newer version is left as it is, with a *VersionError.
func Install(ctx context.Context, db *sql.DB, database string) (InstallResult, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return InstallResult{}, fmt.Errorf("mysqlfence: install: %w", err)
	}
	defer conn.Close()
	if database == "" {
		var cur sql.NullString
		if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&cur); err != nil {
			return InstallResult{}, fmt.Errorf("mysqlfence: install: %w", err)
		}
		if !cur.Valid || cur.String == "" {
			return InstallResult{}, errors.New("mysqlfence: install: no database selected; name one in the DSN (user@tcp(host:3306)/DATABASE)")
		}
		database = cur.String
	}
	res, err := install(ctx, conn, database)
	if ve, ok := errors.AsType[*VersionError](err); ok {
		return InstallResult{}, ve
	}
	if err != nil {
		return InstallResult{}, fmt.Errorf("mysqlfence: install in database %q: %w", database, err)
	}
	return res, nil
}

func install(ctx context.Context, conn *sql.Conn, database string) (InstallResult, error) {
	lock := "tenure_fence install " + database
	if len(lock) > 64 { // GET_LOCK names are at most 64 characters
		lock = lock[:64]
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lock, int(installLockWait/time.Second)).Scan(&got); err != nil {
		return InstallResult{}, fmt.Errorf("take the install lock: %w", err)
	}
	if got.Int64 != 1 {
		return InstallResult{}, fmt.Errorf("take the install lock: another install held it for %s", installLockWait)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lock)

	q := quote(database)
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+q+`.tenure_fence_schema (
	one          TINYINT NOT NULL PRIMARY KEY DEFAULT 1 CHECK (one = 1),
	version      INT NOT NULL,
	installed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB COMMENT='tenure fencing: the installed version of the fence'`); err != nil {
		return InstallResult{}, fmt.Errorf("create the version table: %w", err)
	}
	v, err := readVersion(ctx, conn, q)
	if err != nil && !errors.Is(err, ErrNotInstalled) {
		return InstallResult{}, err
	}
	res := InstallResult{Database: database, From: v, To: Version}
	if v > Version {
		return InstallResult{}, &VersionError{Database: database, Installed: v, Want: Version}
	}
	for i := v; i < Version; i++ {
		for _, stmt := range migrations[i] {
			if _, err := conn.ExecContext(ctx, strings.ReplaceAll(stmt, "{{db}}", q)); err != nil {
				return InstallResult{}, fmt.Errorf("migrate to version %d: %w", i+1, err)
			}
		}
	}
	if v != Version {
		if _, err := conn.ExecContext(ctx, `INSERT INTO `+q+`.tenure_fence_schema (one, version) VALUES (1, ?)
ON DUPLICATE KEY UPDATE version = ?, installed_at = CURRENT_TIMESTAMP(6)`, Version, Version); err != nil {
			return InstallResult{}, fmt.Errorf("record the version: %w", err)
		}
	}
	return res, nil
}

// querier is what readVersion needs: *sql.DB, *sql.Conn and *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readVersion returns the version installed in the quoted database q:
// ErrNotInstalled if there is no version table or no row.
func readVersion(ctx context.Context, db querier, q string) (int, error) {
	var v int
	err := db.QueryRowContext(ctx, "SELECT version FROM "+q+".tenure_fence_schema WHERE one = 1").Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotInstalled
	}
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok && (me.Number == 1146 || me.Number == 1049) {
		// ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR
		return 0, ErrNotInstalled
	}
	if err != nil {
		return 0, fmt.Errorf("read the fence schema version: %w", err)
	}
	return v, nil
}

// quote returns name as a quoted MySQL identifier.
func quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }
