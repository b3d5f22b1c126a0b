// Package httpfence fences requests to an HTTP service with tenure's
// tokens: the client sends the lease and token as headers, and the
// service handles a request only if its token is not lower than the
// highest it has seen for the lease.
//
// # Headers
//
//	Tenure-Lease: jobs/nightly
//	Tenure-Token: 42
//
// Transport adds them to every request of an http.Client, from an
// *election.Lease or fence.Grant(name, token). Any other client can set
// them by hand (curl -H 'Tenure-Token: 42' ...).
//
// # Server
//
// Middleware (net/http) and Interceptor (Connect) check them against a
// Fence. A stale request is answered 409 Conflict with a JSON body naming
// both tokens:
//
//	{"error":"stale_token","message":"...","resource":"jobs/nightly","token":41,"highest":42}
//
// (over Connect: code aborted, which is 409 in the Connect protocol, with
// the tokens in the error's metadata). CheckResponse and StaleFromConnect
// turn those answers back into a *fence.StaleError on the client.
//
// # Where the fence lives
//
// Memory keeps it in the service's memory, for a service with one
// replica. It also keeps handlers of different tokens from overlapping: a
// request with a newer token waits for the requests of older tokens being
// handled to finish, so an older handler never writes after a newer one
// started. Stored keeps it in a store that replicas share, through
// anything with an Advance method: *pgfence.Fence, *redisfence.Fence,
// *filefence.Dir. Across replicas the check is atomic with the record of
// the token but not with what the handlers then write: a handler that
// writes to one of those stores should use the store's guard for the
// write itself, which is atomic with it.
package httpfence
