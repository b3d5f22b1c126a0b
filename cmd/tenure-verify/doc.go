// Command tenure-verify is tenure's fault harness, after etcd's
// tests/robustness. It starts --nodes real tenured processes on loopback
// (each with its own data directory, its raft port behind a fault-injecting
// proxy), runs --workers client processes that acquire (try and wait),
// renew, release, and write and read fenced keys on --names contended lease
// names with short TTLs, and injects a fault schedule generated up front
// from --seed: SIGKILL and restart of nodes (the leader included),
// SIGSTOP/SIGCONT of nodes and of client processes for longer than the TTL,
// raft partitions that isolate one node (the leader included), clock-rate
// skew (a node restarted with --fault-inject-clock-rate and made leader) and
// leadership transfers. --faults picks a subset.
//
// Every operation is recorded with its call and return time. porcupine checks
// each lease name's history against a model of the whole API, with
// indeterminate outcomes as such; plain invariants are checked on top. The
// summary goes to stdout; summary.json always, and on a violation
// history.jsonl and porcupine's HTML visualization, go to --out.
//
//	go run ./cmd/tenure-verify --duration 60s
//	go run ./cmd/tenure-verify --seed 42 --duration 30m
//	go run ./cmd/tenure-verify --seed 42 --plan            # print the schedule only
//	go run ./cmd/tenure-verify --unsafe --faults pause-client --duration 15s
//
// --unsafe is the negative control: the workers' writes and reads go to an
// unfenced store inside the harness, so a paused holder's late write lands;
// the check must then fail with exit 1.
//
// Exit codes: 0 no violation; 1 a violation; 2 bad usage; 3 the harness
// could not run, or porcupine timed out (inconclusive).
//
// The same binary is also the worker: started with TENURE_VERIFY_WORKER set
// it runs one client worker instead.
package main
