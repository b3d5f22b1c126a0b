package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// BenchmarkHeldLeases is the state machine's part of holding 100,000
// leases in 1,000 sessions: each op renews one session's 100 leases, the
// sessions renew every 3.3s in groups of 30 that share an entry (and so
// an expiry), and after every entry the expirer asks for the next
// deadline. One b.N is one entry of 3,000 renewals.
func BenchmarkHeldLeases(b *testing.B) {
	const (
		sessions = 1000
		per      = 100
		group    = 30
		ttl      = 10 * time.Second
		interval = ttl / 3
	)
	s := lease.New()
	refs := make([][]lease.Ref, sessions)
	now := time.Duration(0)
	for i := range sessions {
		var ops []lease.Op
		for j := range per {
			ops = append(ops, lease.Op{Type: lease.OpAcquire, Name: fmt.Sprintf("held/%d/%d", i, j), Holder: fmt.Sprint("s", i), TTL: ttl})
		}
		now += interval / sessions
		res, _ := s.Apply(lease.Batch{Now: now, Ops: ops})
		for j, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			refs[i] = append(refs[i], lease.Ref{Name: ops[j].Name, Token: r.Lease.Token})
		}
	}
	step := interval * group / sessions
	b.ResetTimer()
	next := 0
	for b.Loop() {
		ops := make([]lease.Op, group)
		for k := range ops {
			ops[k] = lease.Op{Type: lease.OpRenew, Refs: refs[next]}
			next = (next + 1) % sessions
		}
		now += step
		res, _ := s.Apply(lease.Batch{Now: now, Ops: ops})
		for _, r := range res {
			if r.Err != nil || r.Renewed[0].Err != nil {
				b.Fatal(r.Err, r.Renewed[0].Err)
			}
		}
		if at, ok := s.NextDeadline(); !ok || at <= now {
			b.Fatalf("next deadline %v, %v at %v", at, ok, now)
		}
	}
}
