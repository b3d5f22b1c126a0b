// Command tenure is the command-line client of a tenure cluster: acquire,
// renew and release leases, watch them, use the fenced key-value store and
// show the cluster's status. See `tenure -h`.
//
// Exit codes (docs/cli.md):
//
//	0  success
//	1  other failure: cluster unreachable, no quorum, internal error
//	2  bad usage or invalid argument (also when the server rejects one)
//	3  the lease is held by another holder, every slot of a semaphore is
//	   held, or acquire --wait timed out
//	4  rejected by fencing: stale token, not the holder, lease expired;
//	   for run: the lease was lost (or at risk) and the command was
//	   stopped; for elect: the leadership was lost
//	5  not authenticated or not permitted (reserved)
//	6  not found: get of a lease that is not held, kv get or kv delete of
//	   a key with no value
//	7  release of a grant that is no longer live (already released,
//	   expired or replaced): nothing was released
//
// With -o json, errors are one JSON object on stderr: code, reason,
// message, holder, token and exit_code.
//
// tenure run NAME -- CMD exits with CMD's code otherwise (128+N if signal
// N ended it).
//
// tenure fence install --postgres URL installs the Postgres fencing
// function tenure_fence, and --mysql DSN the MySQL and MariaDB procedure
// of that name (see docs/fencing.md); it needs no cluster.
//
// The default holder of acquire is the host name, a dash and the process
// ID (e.g. web-1-4242), so two runs of the CLI are two holders; pass
// --holder to renew by acquiring again.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
