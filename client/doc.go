// Package client is the Go client of a tenure cluster: leases with fencing
// tokens, the fenced key-value store and cluster administration.
//
// A Client is given the API addresses of some members (any member serves
// any request; followers forward to the leader) and speaks gRPC to them
// over HTTP/2, cleartext or TLS:
//
//	c, err := client.New(client.Config{Endpoints: []string{"10.0.0.1:7400", "10.0.0.2:7400"}})
//	...
//	l, err := c.Acquire(ctx, "jobs/nightly", "worker-1", 10*time.Second)
//	if errors.Is(err, client.ErrLeaseHeld) { ... }
//	_, err = c.Put(ctx, "jobs/nightly/state", data, l.Name, l.Token)
//
// # TLS and authentication
//
// Config.TLS (or endpoints written https://host:port) speaks TLS: RootCAs
// verifies the servers and Certificates may carry a client certificate,
// whose common name is the caller's principal. Config.Token sends a
// bearer token instead. A server that refuses the credentials answers
// with the codes unauthenticated or permission_denied (connect.CodeOf); a
// grant acquired by another principal gives ErrForbidden. A failed TLS
// handshake (IsTLSError) is not retried.
//
// # Fencing
//
// A lock with a timeout alone does not keep data safe: a holder that
// paused (GC, VM stall, slow network) past its lease still writes when it
// wakes up. The token does: every grant has a token larger than all
// before it, and storage refuses writes carrying an older one. Pass
// Lease.Token with every write the lease protects (Put and Delete here, or
// a guard of package fence for outside storage).
//
// # Semaphores
//
// The Limit option makes Acquire take one slot of a semaphore: up to N
// holders of one name at once, each slot with its own token, which fences
// writes while that slot is held. Slots lists the held slots. The limit
// is fixed by the first grant while any slot is live; another limit
// fails with ErrInvalid.
//
// # Failover and retries
//
// The client tries the endpoint that served it last; when an endpoint
// cannot be reached or answers unavailable (no leader, no quorum), it moves
// on to the next, pausing between rounds (50ms doubling up to 1s by
// default), until the call succeeds or the caller's context ends; then the
// error matches ErrUnavailable. Each attempt is bounded by
// Config.RequestTimeout. Errors that retrying cannot fix (invalid
// argument, held, stale token, not found) are returned at once.
//
// Every call that changes state (Acquire, Renew, Release, Put, Delete)
// carries a request ID: the client's random session (Client.Session), a
// number that every attempt of the call shares, and the lowest number
// still in flight. The cluster applies each call at most once and answers
// a retry with the outcome of the attempt that took effect: a retried
// Acquire whose first attempt was granted gets that grant, with its token,
// even if it expired or went to another holder before the retry. A late
// copy of a call the client already answered or gave up on is refused
// without effect. A Lease's Sent is the send time of the call's first
// attempt.
//
// Reads and every call that changes a lease or the store (Acquire, Renew,
// Release, Revoke, Put, Delete) are retried even when an attempt may have
// reached the server: a connection that broke, an attempt that timed out,
// a leader that lost its leadership while the request was in flight. The
// request ID makes the retry safe: a Put that wrote gets its revision
// back, not a second write and not "stale" because a newer grant wrote the
// key since. (Against a server that predates request IDs a retried write
// could write again or be refused as stale although the first attempt
// wrote.) The membership calls are retried only when the request certainly
// was not applied (the connection could not be opened, or the server
// answered unavailable); otherwise they fail with ErrIndeterminate.
//
// # Sessions, elections and Run
//
// Package election builds on this client: sessions that renew many leases
// in one request and end a holder's context before the server could
// re-grant its lease, campaigns that re-check ownership before they
// return, observers of leader changes, and Run, which runs a function
// while this process leads. Lease.Sent, the send time of the request that
// returned a grant, is what its local deadlines count from.
//
// # Errors
//
// Errors from the server keep its message and match the sentinels of the
// lease package (re-exported here) with errors.Is; a held lease is a
// *HeldError with the holder, its token and remaining time. The
// *connect.Error underneath stays reachable, so connect.CodeOf works.
package client
