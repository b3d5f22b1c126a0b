// Package mysqlfence fences MySQL and MariaDB transactions with tenure's
// tokens: the same contract as pgfence, through a stored procedure.
//
// # The SQL procedure
//
// Install (or `tenure fence install --mysql DSN`) creates, in a database
// (default the DSN's):
//
//   - tenure_fences(resource VARBINARY(1024) PRIMARY KEY, token BIGINT
//     UNSIGNED, updated_at): the highest token accepted per resource
//     (InnoDB; names compare byte for byte);
//   - tenure_fence_schema(version): the installed version (Version);
//   - the procedure tenure_fence(resource, token).
//
// Call tenure_fence first in a transaction, from any language's driver
// or the command-line client:
//
//	START TRANSACTION;
//	CALL tenure_fence('jobs/nightly', 42);
//	UPDATE reports SET body = '...' WHERE id = 1;
//	COMMIT;
//
// If 42 is lower than the highest token accepted for jobs/nightly, the
// CALL fails with SQLSTATE TF001 (StaleSQLState; MySQL error number 1644)
// and the message "tenure_fence: stale token 42 for 'jobs/nightly': a
// write with token 43 was accepted". Otherwise it records 42 (if it is
// newer than the highest) and keeps the resource's row locked until the
// transaction ends, so fenced transactions on one resource run one after
// another: a transaction commits its writes only while its token is the
// highest accepted. An empty resource, one longer than 1024 bytes, or a
// token outside 1..2^64-1 fails with TF002 (InvalidSQLState).
//
// # An error ends the statement, not the transaction
//
// Unlike Postgres, MySQL and MariaDB end only the failed statement: the
// transaction stays open, with what it wrote before. A caller must roll
// back on the fence's error (as on any error): drivers' transaction
// helpers do, InTx does, and the command-line client stops at the first
// error and disconnects, upon which the server rolls the transaction
// back. A program that goes on and commits after the error commits
// unfenced writes.
//
// # Isolation levels and reads
//
// The procedure reads the fence row with a locking read, which sees the
// row as committed last, at every isolation level. InnoDB takes a
// transaction's snapshot (REPEATABLE READ) at its first plain read: call
// the fence before any read, and the reads after it see every write
// committed before the fence. A snapshot taken earlier (START
// TRANSACTION WITH CONSISTENT SNAPSHOT, or a read before the fence) can
// miss a late holder's write that committed while this transaction
// waited for the fence row, and writing what was computed from it loses
// that write; ReadModifyWrite does it in the safe order.
//
// # Deadlocks
//
// The fence inserts a resource's row the first time, with INSERT ... ON
// DUPLICATE KEY UPDATE, which locks the row whether it inserts or finds
// it. A transaction that fences one resource waits only in that first
// statement, holding nothing yet, and is never a deadlock victim through
// the fence. One that fences several resources for the first time at
// once can be (InnoDB takes gap locks around new rows while checking for
// duplicates, whatever the order): InTx runs a deadlock victim again
// (Config.Retries); plain SQL should retry error 1213, as for any InnoDB
// transaction.
//
// # MySQL 8
//
// The package is tested against MariaDB 10.11; MySQL 8 differs in:
//   - Binary logging is on by default, and MySQL then refuses to create a
//     stored function that writes unless the installer has SUPER (or
//     SYSTEM_VARIABLES_ADMIN) or log_bin_trust_function_creators is on.
//     That is why the fence is a procedure, which needs only CREATE
//     ROUTINE (plus CREATE, INSERT, UPDATE, SELECT on the database to
//     install, and EXECUTE to call): CALL tenure_fence(...), not SELECT.
//   - MySQL keeps at most 128 characters of a SIGNAL's MESSAGE_TEXT
//     (MariaDB up to 512): the procedure shortens a long resource name in
//     the message, never the tokens.
//   - The procedure runs with its definer's rights (SQL SECURITY
//     DEFINER): callers need EXECUTE on it, not rights on tenure_fences.
//     The definer (the installing user) must keep existing.
//   - SIGNAL, GET_LOCK, INSERT ... ON DUPLICATE KEY UPDATE and the
//     locking behave the same; MySQL 8 has no CREATE OR REPLACE
//     PROCEDURE, so a migration drops and creates it (Install holds a
//     named lock meanwhile; a call in between fails with error 1305 and
//     should be retried).
//
// # Go
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	f, err := mysqlfence.New(ctx, db, mysqlfence.DefaultConfig())
//	err = f.InTx(ctx, lease, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "UPDATE reports SET body = ? WHERE id = 1", body)
//		return err
//	})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop */ }
//
// lease is an *election.Lease, or fence.Grant(name, token) for a plain
// number. New refuses a fence whose installed version is not Version
// (older: run the installer; newer: upgrade the program) and changes
// nothing. Install is idempotent, takes a named lock against concurrent
// installers, migrates an older fence, and refuses a newer one without
// changing it. The driver is github.com/go-sql-driver/mysql.
package mysqlfence
