// Package pgfence fences Postgres transactions with tenure's tokens.
//
// # The SQL function
//
// Install (or `tenure fence install --postgres URL`) creates, in a schema
// (default public):
//
//   - tenure_fences(resource text PRIMARY KEY, token bigint, updated_at):
//     the highest token accepted per resource;
//   - tenure_fence_schema(version): the installed version (Version);
//   - tenure_fence(resource text, token bigint) RETURNS bigint.
//
// Call tenure_fence first in a transaction, from any language:
//
//	BEGIN;
//	SELECT tenure_fence('jobs/nightly', 42);
//	UPDATE reports SET body = '...' WHERE id = 1;
//	COMMIT;
//
// If 42 is lower than the highest token accepted for jobs/nightly, it
// raises an error with SQLSTATE TF001 (StaleSQLState; its DETAIL is
// "highest token: N") and the transaction is aborted: nothing it did
// commits. Otherwise it records 42 (if it is newer than the highest) and
// keeps the resource's fence row locked until the transaction ends, so
// fenced transactions on one resource run one after another: a
// transaction commits its writes only while its token is the highest
// accepted. An empty resource or a token below 1
// raises TF002 (InvalidSQLState).
//
// # Isolation levels
//
// Under READ COMMITTED (Postgres's default) a transaction that waits for
// the fence row sees it as the other transaction committed it, and is
// refused if that one had a higher token. Under REPEATABLE READ and
// SERIALIZABLE it fails instead with a serialization failure (SQLSTATE
// 40001): the row changed after its snapshot was taken. That is not a
// stale token; run the transaction again, and the new run sees the row
// and passes or is refused on its token. InTx does this by itself
// (Config.Retries); IsSerializationFailure tells the two apart for
// transactions of your own.
//
// # Go
//
//	f, err := pgfence.New(ctx, pool, pgfence.DefaultConfig())
//	err = f.InTx(ctx, lease, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "UPDATE reports SET body = $1 WHERE id = 1", body)
//		return err
//	})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop */ }
//
// lease is an *election.Lease, or fence.Grant(name, token) for a plain
// number. New refuses a schema whose installed version is not Version
// (older: run the installer; newer: upgrade the program) and changes
// nothing. Install is idempotent, takes an advisory lock against
// concurrent installers, migrates an older schema, and refuses a newer
// one without changing it.
//
// Tokens are stored as bigint: a token above 2^63-1 is refused with
// fence.ErrInvalid (tenure would need more than 9e18 grants to reach one).
package pgfence
