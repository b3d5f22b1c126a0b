// Package verify is tenure's fault harness: it runs real tenured
// processes, drives client worker processes against a few contended lease
// names while a seeded nemesis kills, pauses, partitions and skews nodes and
// pauses clients, records every operation, and checks the history with
// porcupine and with plain invariants. cmd/tenure-verify is its command;
// DESIGN.md next to this file says exactly what each fault and each check
// means.
package verify
