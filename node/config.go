package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenure-io/tenure/internal/tlsconfig"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/lease"
)

// DefaultRenewHeadroom is tenured's --renew-headroom: long enough that
// most renewals of a lease with a TTL up to 10s come from memory, short
// enough that an abandoned lease outlives a failover by at most 10s.
const DefaultRenewHeadroom = 10 * time.Second

// Config configures a Node. Start from DefaultConfig.
type Config struct {
	// ID is the node's raft server ID. Default: the advertised raft
	// address. A data directory remembers the ID it was created with.
	ID string
	// DataDir holds the raft log (bbolt), stable store and snapshots.
	// Required unless InMemory is set.
	DataDir string
	// InMemory keeps log, stable store and snapshots in memory (tenured
	// --dev, tests). Nothing survives the process.
	InMemory bool
	// RaftAddr is the raft TCP bind address. Default 127.0.0.1:7401.
	RaftAddr string
	// RaftAdvertise is the raft address other nodes dial. Default: the
	// bound address.
	RaftAdvertise string
	// PeerTLS, if set, runs raft over mutual TLS: every raft connection,
	// both ways, presents a certificate from the cluster's CA, before the
	// cluster-ID handshake. Nil: plain TCP.
	PeerTLS *tlsconfig.Peer
	// APIAddr is the client API address other nodes forward requests to.
	APIAddr string
	// Bootstrap makes the node start a new single-node cluster when it has
	// no raft state. tenured sets it unless --join is given.
	Bootstrap bool
	// Transport overrides the TCP transport (tests use raft's in-memory
	// transport to cut links).
	Transport raft.Transport

	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout are passed
	// to raft. Defaults 300ms, 300ms and 150ms: fast failover on a LAN.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (log compaction). Default 8192.
	SnapshotThreshold uint64
	// SnapshotInterval is how often raft checks the threshold. Default 30s.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries a snapshot leaves in the log for
	// slow followers. Default 10240.
	TrailingLogs uint64

	// Limits bounds requests. MinTTL is raised to at least twice the
	// election timeout. Default lease.DefaultLimits().
	Limits lease.Limits
	// MaxBatchOps is the most operations one raft entry carries.
	// Default 1024.
	MaxBatchOps int
	// MaxBatchBytes bounds the size of one raft entry, estimated from
	// the operations it carries; a single larger request (a value near
	// the 1 MiB limit) still goes out, alone. Default 4 MiB.
	MaxBatchBytes int
	// MaxInflight is how many entries the proposer keeps in flight before
	// it waits and lets requests pile up into a larger batch. Default 4.
	MaxInflight int
	// ApplyTimeout bounds one raft apply. Default 10s.
	ApplyTimeout time.Duration
	// History is the retention of the lease history (terms per name,
	// and how long after it ended a term is kept, in cluster time) that
	// this node proposes when it takes over as leader and finds another
	// in the state; every replica then keeps the same terms (see
	// lease/history.go). Set the same on every member. Terms 0 keeps
	// no history; the zero value proposes nothing. Default
	// lease.DefaultHistoryRetention() (16 terms, 24h).
	History lease.HistoryRetention

	// RenewHeadroom, if positive, lets the leader answer renewals from
	// memory: every renewal in the log keeps its lease for up to
	// min(TTL, RenewHeadroom) past what its holder is told, and a renewal
	// that fits in that is answered without a log entry (see memory.go).
	// A lease nobody renews still ends when its holder was told, except
	// after a failover, when it may be kept that much longer. 0 puts every
	// renewal in the log. Default DefaultRenewHeadroom.
	RenewHeadroom time.Duration

	// ClockRate scales the monotonic clock this node stamps cluster time
	// with while it leads. 1 is real time. Only the fault harness changes
	// it, to simulate clock-rate skew. Default 1.
	ClockRate float64
	// FaultSkipFsync makes the raft log (raftlog NoSync) and raft.db
	// (bbolt NoSync) skip fsync, so that a power loss loses entries this
	// node acknowledged. Only the fault harness sets it, as a negative
	// control. Default false.
	FaultSkipFsync bool
	// FaultBeforeAppend, if set, runs on this node before raft stores
	// entries a leader sent (one AppendEntries request: the first and last
	// index), and may block: tests hold a member's catch-up back with it.
	// Heartbeats pass while it blocks. Only tests set it. Default nil.
	FaultBeforeAppend func(first, last uint64)
	// PeerProgress returns how far the node whose client API is at
	// apiAddr has come, as it says itself. The promoter uses it to decide
	// when a non-voter has caught up: it has applied (nearly) all of the
	// leader's log and no longer refuses to vote. If nil, non-voters are
	// promoted as soon as they answer raft heartbeats for one promotion
	// interval.
	PeerProgress func(ctx context.Context, apiAddr string) (PeerProgress, error)

	// Logger receives the node's structured logs. Default slog.Default().
	Logger *slog.Logger
	// RaftLogOutput, if set, receives hashicorp/raft's own logs in
	// hclog's text format. Default nil: they go to Logger, with the
	// attribute logger=raft.
	RaftLogOutput io.Writer
	// RaftLogLevel is raft's log level (trace, debug, info, warn, error).
	// Default warn.
	RaftLogLevel string
	// Registerer receives the node's Prometheus metrics. Nil registers
	// nothing.
	Registerer prometheus.Registerer

	// afterBarrier, if set, runs in a takeover right after the barrier
	// succeeded (tests use it to end leadership at that moment).
	afterBarrier func(n *Node, t *leaderTerm)
	// beforeLogSync, if set, runs before each background sync of the
	// leader's raft log (tests hold syncs back with it).
	beforeLogSync func()
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{
		RaftAddr:           "127.0.0.1:7401",
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond,
		SnapshotThreshold:  8192,
		SnapshotInterval:   30 * time.Second,
		TrailingLogs:       10240,
		Limits:             lease.DefaultLimits(),
		MaxBatchOps:        1024,
		MaxBatchBytes:      4 << 20,
		MaxInflight:        4,
		ApplyTimeout:       10 * time.Second,
		History:            lease.DefaultHistoryRetention(),
		RenewHeadroom:      DefaultRenewHeadroom,
		ClockRate:          1,
		RaftLogLevel:       "warn",
	}
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.DataDir == "" && !c.InMemory:
		return errors.New("node: a data directory is required (or in-memory mode)")
	case c.RaftAddr == "" && c.Transport == nil:
		return errors.New("node: a raft address is required")
	case c.HeartbeatTimeout <= 0 || c.ElectionTimeout <= 0 || c.LeaderLeaseTimeout <= 0:
		return errors.New("node: raft timeouts must be positive")
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("node: leader lease timeout %s exceeds heartbeat timeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.MaxBatchOps <= 0 || c.MaxInflight <= 0 || c.MaxBatchBytes <= 0:
		return errors.New("node: batch size and in-flight limit must be positive")
	case c.ClockRate <= 0:
		return errors.New("node: clock rate must be positive")
	case c.RenewHeadroom < 0:
		return fmt.Errorf("node: renewal headroom %s is negative", c.RenewHeadroom)
	case c.Limits.MaxTTL < c.Limits.MinTTL:
		return errors.New("node: maximum TTL is below the minimum")
	case c.History != (lease.HistoryRetention{}):
		if err := c.Limits.Validate(lease.HistoryConfigOp(c.History)); err != nil {
			return fmt.Errorf("node: history retention: %w", err)
		}
	}
	return nil
}

// MinTTL returns the shortest TTL the node accepts: the configured minimum,
// raised to twice the election timeout so that a lease always outlives a
// leader election.
func (c *Config) MinTTL() time.Duration {
	m := c.Limits.MinTTL
	if e := 2 * c.ElectionTimeout; m < e {
		m = e
	}
	return m
}

// PeerProgress is how far a member has come, as its Status says.
type PeerProgress struct {
	// Applied is its applied index.
	Applied uint64
	// CatchingUp is set while it does not vote: it joined without raft
	// state it can vouch for and its log has not reached its catch-up
	// index.
	CatchingUp bool
	// Behind is set while it has not applied what its leader committed
	// (Status.Behind).
	Behind bool
}
