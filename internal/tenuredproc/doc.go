// Package tenuredproc is the one way tenure's tests, demo and fault harness
// find, start, watch and stop tenured processes.
//
// Lookup: Find takes an explicit path, then looks next to the running
// executable (and in any extra directories), then, only when asked, on
// PATH, and builds cmd/tenured with `go build` into a directory when one is
// given. Tests and the harness build, so they never run a stale binary from
// PATH; the demo looks on PATH, because it is run by users who installed
// tenure.
//
// Ports: ReservePorts hands out loopback ports chosen at random below the
// kernel's ephemeral range (so no listen on port 0 and no outgoing
// connection gets them) and holds an advisory lock file per port in a
// directory shared by every process of the machine's user for as long as
// the Ports value lives (or the process does; the kernel drops the lock
// when it exits). A node that is down keeps its ports reserved, so no
// other cluster, in this process or in a test package running in
// parallel, can take a killed node's raft port and receive raft traffic
// meant for another cluster. The port is also checked free by binding it.
//
// Processes: Start runs tenured with a log writer and keeps the tail of its
// output; the kernel kills it if this process dies (Linux). WaitReady polls
// /readyz with a deadline and says what it waited for and why it gave up.
// This package imports no testing code, so the demo uses it too.
package tenuredproc
