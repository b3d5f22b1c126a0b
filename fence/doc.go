// Package fence holds what the storage guards of tenure share: the rule,
// the error of a stale write, and the small interface through which a
// guard learns a write's resource and token.
//
// # The rule
//
// A guarded write carries a resource name and a fencing token. The store
// accepts it only if the token is not lower than the highest token it has
// recorded for that resource (an equal token passes: a holder writes many
// times with its one token), records the token, and performs the write,
// all in one atomic step. A holder that paused past its lease and wakes up
// after a newer holder wrote carries a lower token, and its write is
// refused with a *StaleError, which matches ErrStale with errors.Is.
//
// tenure grants tokens that grow across every lease, so a resource can be
// fenced with the token of any lease that protects it; by default the
// guards use the lease's name as the resource.
//
// # The guards
//
// One package per store keeps drivers out of programs that do not use
// them:
//
//   - fence/pgfence: a SQL function tenure_fence(resource, token) that any
//     language calls as the first statement of a transaction, its schema
//     installer (also `tenure fence install --postgres URL`), and a Go
//     helper that runs a function in a fenced transaction (pgx v5).
//   - fence/mysqlfence: the same for MySQL and MariaDB, a stored
//     procedure tenure_fence(resource, token) called first in a
//     transaction (`tenure fence install --mysql DSN`), and its Go helper
//     (go-sql-driver/mysql).
//   - fence/redisfence: Lua scripts that check the fence and write (SET,
//     HSET, DEL, a fenced GET, or a script body of your own) in one step,
//     shipped as files for any language (go-redis v9).
//   - fence/filefence: files in a directory replaced atomically under a
//     lock, only when the token passes.
//   - fence/httpfence: net/http middleware and a Connect interceptor that
//     refuse stale requests with 409, and a client RoundTripper that sends
//     the lease and token as headers.
//
// A guard takes the token through the Lease interface, which
// *election.Lease satisfies; Grant makes one from a plain name and number
// (a token given to a script in $TENURE_TOKEN, say). This package imports
// nothing of tenure's client, so fencing needs no dependency on it.
//
// A read-modify-write is safe only when its read is fenced too, or read
// and write share one fenced transaction: pgfence and mysqlfence have
// ReadModifyWrite, redisfence and filefence Update and a fenced read, and
// httpfence fences every request sent with the headers, reads included.
// See docs/fencing.md for how to fence each
// store, and stores with conditional writes of their own.
package fence
