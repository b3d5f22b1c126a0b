// Package demo is `tenure demo`: it shows, with no setup, why a lease
// needs a fencing token, and checks that tenure provides one. It prints a
// timeline (time since the scenario began, actor, event, token, outcome)
// and judges each scenario against its expected outcome.
//
// # Scenarios
//
//  1. fenced: worker A acquires a lease (token t) and writes; A stalls for
//     longer than the TTL; the lease expires and B, queued for it, is
//     granted token > t and writes; A wakes and writes with t. Expected:
//     tenure's fenced key-value store rejects A's write as stale, and the
//     final value is B's.
//  2. timeout-lock: the same timing against a store that ignores tokens (a
//     map in memory, or files with --real). Expected: A's late write
//     overwrites B's, and the timeline says "LOST UPDATE: B's write was
//     overwritten". The lock did its job; the data was corrupted anyway.
//  3. failover: B holds a lease and writes when the leader node of the
//     lease cluster crashes (node.Abort, its API server closed). Expected:
//     B's renewal, which its client retries on the live nodes, keeps the
//     same token; every acknowledged write is still there; a grant after B
//     releases gets a larger token.
//
// Two more scenarios need a Postgres server (Config.Postgres; skipped with
// a note when it does not answer within PostgresTimeout). They run when
// named, and with all when tenure demo is given --postgres; they work in a
// schema of their own (tenure_demo_...), dropped at the end:
//
//  4. postgres: scenario 1's timing, each write a transaction whose first
//     statement is tenure_fence(lease, token) (package fence/pgfence).
//     Expected: A's late transaction fails with SQLSTATE TF001 and is
//     rolled back; the table keeps B's row, and its log holds A-1 and B-1
//     only.
//  5. db-lock: a Postgres advisory lock (pg_advisory_lock) instead of a
//     lease. A takes it on its connection and writes, then stalls; B waits
//     for it, still a TTL into A's pause (what the lock protects); then
//     A's connection is terminated (pg_terminate_backend, standing in for
//     a network cut or an idle timeout), the server frees the lock, B
//     takes it and writes; A wakes, finds its connection gone, writes on a
//     new one, and nothing stops it. Expected: the lost update, as in
//     scenario 2: the lock is tied to the connection and carries no token.
//
// # Where it runs
//
// By default everything runs in one process: a three-node cluster with
// in-memory raft state, a real TCP raft transport and the real API server
// on loopback ports (node 1 bootstraps, the others join through the
// leader), with a 200ms election timeout so the minimum TTL is 400ms.
// The workers are goroutines that use the client package over HTTP with
// all three endpoints. A's stall is a sleep: the stand-in for a
// stop-the-world pause (GC, VM stall) during which A does nothing at all.
//
// With Config.Real (tenure demo --real), scenarios 1 and 2 run with
// processes: a single-node tenured child (found next to the tenure
// executable or on PATH; data in a temporary directory; free loopback
// ports; the same 200ms election timeout and 400ms minimum TTL) and one
// child process per worker, running the hidden `tenure
// demo worker` subcommand (ParseWorker, Worker.Run), which reports its
// steps as JSON lines on its standard output. There A does ordinary
// "work" for half the TTL and the demo freezes it with SIGSTOP meanwhile,
// then thaws it with SIGCONT after the pause. Scenario 2's store is then
// one file per key in the temporary directory, written with no check.
// Children are killed on every way out, Ctrl-C included, and on Linux
// also if the demo itself is killed (parent-death signal). Scenario 3
// needs an in-process cluster and is skipped with --real.
//
// # Timing
//
// The TTL defaults to 2s and A's pause to TTL + max(TTL/2, 500ms); the
// pause must be longer than the TTL. B takes over about one TTL after A's
// grant, so the pause must also leave B time to write before A wakes, or
// scenario 2 has nothing to overwrite (it then fails and says so). A
// default run takes about 10 seconds.
//
// # Output
//
// Text is a table, coloured only when standard output is a terminal and
// NO_COLOR is unset (UseColour). JSON (-o json) is one object per line,
// each with a "type":
//
//	demo      mode (in-process or real), endpoints, ttl, pause, ...
//	scenario  scenario, title, number, of
//	event     scenario, time (Go duration since the scenario began), actor,
//	          op, event (the text), value, token (a number), outcome,
//	          error (stale_token, lease_held, indeterminate, error), tone
//	result    scenario, passed, summary, elapsed
//	note      scenario, text (a skipped scenario)
//	summary   passed, scenarios, failed, skipped, elapsed
//
// The exit status of tenure demo is 0 only when every scenario that ran
// produced its expected outcome (Run returns a *FailedError otherwise).
package demo
