// Package election builds locks and leader election on a tenure client:
// sessions that keep leases renewed, campaigns, observers, and Run, which
// runs a function while this process leads.
//
// # Sessions and leases
//
// A Session is one holder on one client. It acquires leases for that holder
// (Acquire waits in the server's FIFO queue, TryAcquire asks once) and
// renews all of them together in one request every RenewInterval (TTL/3 by
// default). Each acquired lease is a *Lease: its name, fencing token,
// state and a context. AcquireSlot and TryAcquireSlot take one slot of a
// semaphore (up to N holders at once, each with its own token), and
// RunConfig.Limit makes Run hold a slot.
//
// The lease's local deadline is
//
//	send time of the last successful grant or renewal + TTL*(1-Drift) - Margin
//
// on this machine's monotonic clock (defaults: Drift 1%, Margin
// max(TTL/10, 100ms)). The server cannot expire the lease before the send
// time + TTL as measured by its own clock, and Drift bounds how much faster
// that clock may run, so the deadline comes at least Margin before anyone
// else can be granted the lease. The lease's context (Ctx, Done) ends at the
// deadline unless a renewal moved it: a holder that watches its context
// steps down before the server can re-grant, and has Margin to finish
// stopping.
//
// A Lease is in one of four states:
//
//   - Held: the last renewal succeeded.
//   - AtRisk: the last renewal attempt failed or was not confirmed within
//     RenewTimeout. Renewals continue; a success in time makes it Held
//     again. The context is still live.
//   - Lost: the deadline passed with no renewal confirmed, or the server
//     answered that the grant is gone (released by someone else, expired,
//     granted again). The context has ended with a *LostError; this is
//     final.
//   - Released: Release (Resign) or Session.Close gave it back.
//
// Changed signals every change of state or deadline. Release ends the
// context before it asks the server to free the lease, so the holder
// stops before the next holder starts. Session.Close releases all leases;
// Session.Orphan only stops renewing, and the leases run out.
//
// Acquiring is idempotent: the client retries an acquire on other
// endpoints, and an acquire by the current holder is a renewal with the
// same token. A lease that was granted after a wait is confirmed with a
// renewal before it is returned, so its deadline is based on a recent send
// time, never on the start of a long wait; no lease is ever handed over
// whose deadline has passed.
//
// # Fencing
//
// Stepping down in time is not enough on its own: a process can pause
// (GC, VM stall, SIGSTOP) after it checked its context and before its
// write reaches storage. The token closes that hole. Pass Lease.Token with
// every write the lease protects; the built-in store (Lease.Put,
// Lease.Delete) refuses writes whose token is not the current grant, and
// the guards of package fence do the same for outside storage.
//
// # Elections
//
// Campaign is Acquire under the name elections use: it blocks until this
// session's holder leads the name and returns the leadership as a *Lease.
// Resign gives it up. Observe reports each new leader of a name with its
// holder and token, in commit order.
//
// Run is the whole loop, in the shape client-go's leader election has:
// campaign, call fn with a context that ends when the leadership is at
// risk of being lost (at the local deadline at the latest), campaign again
// after a loss, until the parent context ends; callbacks report started,
// stopped and new leaders. If fn returns while still leading, Run releases
// the lease and returns fn's error, so Run also serves as a lock around a
// job.
//
// See docs/go-guide.md for a guide with examples and a comparison with
// client-go's leader election and etcd's concurrency package.
package election
