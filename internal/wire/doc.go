// Package wire converts between the lease package's types and errors and
// the tenure.v1 API: leases to and from protobuf messages, and domain errors
// to and from Connect errors.
//
// The server and the client share one table (see ToConnectError), so an
// error mapped on one side is mapped back on the other and errors.Is and
// errors.As work across the wire:
//
//	lease.ErrInvalid          invalid_argument
//	*lease.HeldError          failed_precondition, detail reason LEASE_HELD
//	                          with the holder, its token and remaining time
//	lease.ErrStaleToken       failed_precondition, detail reason STALE_TOKEN
//	lease.ErrNotFound         not_found, detail reason NOT_FOUND
//	context.DeadlineExceeded  deadline_exceeded
//	context.Canceled          canceled
//	*connect.Error            passed through unchanged
//	anything else             internal
package wire
