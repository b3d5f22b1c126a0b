// Command tenure-verify is tenure's fault harness, after etcd's
// tests/robustness. It starts --nodes real tenured processes on loopback
// (each with its own data directory and reserved ports, its raft port
// behind a fault-injecting proxy, small snapshot settings), runs --workers
// client processes that acquire (try and wait), renew, release, and write
// and read fenced keys on --names contended lease names with short TTLs,
// --election-workers processes that lead names through package election
// (ending half their terms by handing off to the next in line) and write
// under each term, and one watcher per node (the lease workers also, now
// and then, hold the name rw-0 shared or exclusive, try a fenced write
// under it and release it); and it injects a
// fault schedule generated up front from --seed.
//
// Faults (--faults picks a subset; by default every kind but power-loss,
// below; --faults all is every kind, power-loss included): kill (SIGKILL and
// restart, the leader included), pause (SIGSTOP/SIGCONT a node for longer
// than the TTL), partition (isolate a node's raft traffic), clock (a node
// restarted with --fault-inject-clock-rate and made leader), transfer
// (leadership transfer), pause-client (SIGSTOP a worker process), flap
// (transfer leadership again 100-300ms after each takeover), snapshot (a
// follower cut off until it must install a snapshot), partition-split (a
// minority with the leader cut from the majority), partition-bridge (one
// link cut, a third node bridging), member (Leave a follower, wipe it and
// re-add it with --join), restart-all (every node killed and restarted)
// and damaged-dir (a follower's raft.db emptied: tenured must refuse to
// start, exit 1 naming raft.db; the directory is then restored).
//
// One more fault runs only when asked for, as it needs FUSE (root and
// /dev/fuse): power-loss. With it every node's data directory is a mount
// of internal/faultfs, which models a disk with a volatile write cache;
// the fault SIGKILLs one node, then a minority, then every node at once
// (the variants take turns), drops every write they had not synced
// (file data by fsync or fdatasync, directory entries by fsync of the
// directory), remounts and restarts them. It runs with every other kind:
// member and damaged-dir wipe and restore a data directory's contents, not
// the directory (the mount point), and sync each file they write and each
// directory whose entries they change, so that a later power cut cannot
// undo them. A node that refuses to start
// after it (restarts-after-power-loss), a cluster that does not recover
// within 30s (recovers-after-power-loss), and a final state that cannot
// be read (acked-writes-durable) are violations.
//
// Checks: every lease name's history is checked for linearizability
// against a model of the whole API, with indeterminate outcomes taking
// effect within --effect-window of their call, in segments cut at quiescent
// points and chained through every state a segment can end in (so a long
// run ends OK or FAIL); plain invariants (tokens-grow, no-stale-write,
// acked-writes-durable, no-overlapping-grants); election terms
// (term-tokens-grow, no-write-after-term, live-terms-disjoint); watch
// streams against the commit order (watch-complete); read-write locks
// (rw-exclusion: in every watch stream an exclusive grant is made only
// while the name has no other grant, a shared one only while it has no
// exclusive one; shared-no-write: no write with a shared token is
// accepted); and
// damaged-dir-refused; with power-loss, restarts-after-power-loss and
// recovers-after-power-loss; and workers-ran, that every worker process
// lived to the end of the run (one that died leaves its operation in
// flight out of the history, and the run says so rather than blame the
// cluster for what the history cannot explain). The summary goes to stdout and summary.json to
// --out; a failing run also leaves history.jsonl, watch.jsonl, the
// visualization of each failing segment (history-NAME.html) and every
// node's log there, and says so.
//
//	go run ./cmd/tenure-verify --duration 60s
//	go run ./cmd/tenure-verify --seed 42 --duration 30m
//	go run ./cmd/tenure-verify --seed 42 --plan            # print the schedule only
//	go run ./cmd/tenure-verify --recheck verify-out        # check a kept history again
//	go run ./cmd/tenure-verify --unsafe --faults pause-client --duration 15s
//	go run ./cmd/tenure-verify --faults power-loss --duration 2m
//	go run ./cmd/tenure-verify --faults power-loss --unsafe-skip-fsync --duration 30s
//	go run ./cmd/tenure-verify --faults all --duration 4m  # every kind, power-loss included
//
// --unsafe is the negative control: the workers' writes and reads go to an
// unfenced store inside the harness, so a paused holder's late write lands;
// the check must then fail with exit 1. --unsafe-skip-fsync is the
// negative control of power-loss: tenured runs with the hidden
// --fault-inject-skip-fsync (its raft log and raft.db never fsync), so a
// power loss loses what it acknowledged; the check must fail with exit 1.
//
// Exit codes: 0 no violation; 1 a violation; 2 bad usage; 3 the harness
// could not run, or a segment's search timed out (inconclusive).
//
// The same binary is also the worker: started with TENURE_VERIFY_WORKER set
// it runs one client worker instead.
package main
