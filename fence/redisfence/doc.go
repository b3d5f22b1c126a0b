// Package redisfence fences writes to Redis with tenure's tokens: each
// guarded write is one Lua script that checks the resource's fence,
// performs the write and records the token, atomically (Redis runs a
// script alone).
//
// # Key layout
//
// The fence of resource R is the string key
//
//	tenure:fence:{R}
//
// (Config.Prefix, then R in braces) holding the highest token accepted, in
// decimal. The braces make R the key's hash tag: in a Redis Cluster, every
// key a guarded write touches must carry the same tag, so that it lives
// in the fence's slot, for example
//
//	reports:{jobs/nightly}:latest
//
// On a single Redis any key works. Resources with braces in their names
// are refused (they would change the tag).
//
// # Writes
//
// Set, HSet and Del do what SET, HSET and DEL do, only if the token is not
// lower than the fence: otherwise the error is a *fence.StaleError and
// nothing changes. Script turns a Lua body of your own into a guarded
// script. The scripts are sent with EVALSHA and, the first time a server
// sees them, with EVAL (go-redis's Script.Run).
//
// A key of the wrong type is refused with ErrWrongType before anything is
// written: a fenced SET on a key holding a hash or a list (SET itself
// would replace it), a fenced HSET on a key that is not a hash, a fence
// key that does not hold a token.
//
// # Use
//
//	f, err := redisfence.New(rdb, redisfence.DefaultConfig())
//	err = f.Set(ctx, lease, "reports:{jobs/nightly}:latest", body, 0)
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop */ }
//
// lease is an *election.Lease, or fence.Grant(name, token) for a plain
// number.
package redisfence
