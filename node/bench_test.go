package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// BenchmarkRenewParallel measures replicated renewals on a single node
// with its log on disk (fsync on): concurrent callers share raft entries
// through the batching proposer. Reports ops/entry from the batch
// histogram's average.
func BenchmarkRenewParallel(b *testing.B) {
	for _, inflight := range []int{1, 4} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			cfg := testConfig(b, "b1")
			cfg.DataDir = b.TempDir()
			cfg.Bootstrap = true
			cfg.MaxInflight = inflight
			_, cfg.Transport = raft.NewInmemTransport("b1")
			n, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			waitFor(b, "leadership", 5*time.Second, n.IsLeader)
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("l%d", next.Add(1))
				r, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: name, Holder: "h", TTL: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				ref := lease.Ref{Name: name, Token: r.Lease.Token}
				for pb.Next() {
					res, err := n.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}})
					if err == nil {
						err = res.Renewed[0].Err
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/float64(n.raft.LastIndex()), "ops/entry")
		})
	}
}
