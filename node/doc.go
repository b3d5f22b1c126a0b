// Package node replicates the lease state machine with Raft
// (hashicorp/raft): a bbolt log store with fsync on, file snapshots, a TCP
// transport, membership changes, and the leader's loop.
//
// The leader loop does four things:
//
//   - It stamps every batch with cluster time: max(last applied cluster
//     time, base + monotonic time since this node became leader), where base
//     is the cluster time applied when it took over, read after a Barrier.
//   - Its proposer coalesces concurrent requests into one raft entry while
//     earlier entries are in flight, so load turns into larger batches
//     instead of more entries.
//   - Its expirer proposes an expiry at the next lease deadline.
//   - Its promoter turns joined non-voters into voters once they caught up.
//
// Waiting acquires are queued inside the state machine itself (see package
// lease), so a grant to the first waiter commits in the same entry as the
// release or expiry that freed the lease. The node only parks the caller
// until it sees that grant applied. A call with a request ID (see
// lease/session.go) that is retried on a new leader finds the grant as
// its call's remembered result, and when a wait times out the node's
// leave-the-queue-and-try-once carries the call's request ID, so its
// answer becomes that call's outcome.
package node
