// Package lease is tenure's state machine: named leases with fencing tokens,
// FIFO wait queues, and a fenced key-value store.
//
// It is pure and deterministic. It does no I/O, reads no clock and starts no
// goroutines: every change is a [Batch] of [Op]s stamped with a cluster time
// and applied with [State.Apply]. The same sequence of batches always yields
// the same state and results, which is what lets the node package replicate
// it with Raft.
//
// The rules it enforces:
//
//   - Every grant gets a token strictly larger than every token granted
//     before it. Renewals keep the token. The counter is part of snapshots.
//   - At most one live holder per name, judged by cluster time: a lease whose
//     expiry time has passed is free for any command stamped at or after it.
//   - The fenced store accepts a write only when its token is the current,
//     unexpired grant of the named lease and is not lower than the token of
//     the last accepted write to that key (deleted keys keep that fence).
//
// [Manager] wraps a State with an injected clock so the package can be used
// on its own as an in-process lease manager.
//
// See DESIGN.md in this directory for the reasoning behind the rules.
package lease
