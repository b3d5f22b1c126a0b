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
// # From any language
//
// The scripts are the files in scripts/ (set.lua, hset.lua, del.lua,
// get.lua, advance.lua, highest.lua), embedded into this package, so Go
// and any other client run the same scripts under the same SHA1 digests.
// scripts/README.md has their calling convention (KEYS[1] the fence key,
// ARGV[1] the token; the error replies TENURE_STALE N, TENURE_INVALID,
// TENURE_WRONGTYPE) and their use from redis-cli, Python and TypeScript.
//
// # Read-modify-write
//
// Get is a fenced read: it records the token like a write, so no lower
// token writes after it. Update reads with Get, computes, and writes
// with Set. Reading with a plain GET and writing with Set loses a late
// holder's write that lands between the two (see docs/fencing.md).
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
