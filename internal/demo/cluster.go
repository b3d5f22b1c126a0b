package demo

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/tenure-io/tenure/internal/localcluster"
	"github.com/tenure-io/tenure/node"
)

// startCluster starts the lease cluster embedded in this process: three
// nodes with in-memory raft state, raft over loopback TCP and the real API
// server on loopback ports. Workers reach it through the client package
// like any program would. Logs go to logs (io.Discard for none).
func startCluster(ctx context.Context, logs io.Writer) (*localcluster.Cluster, error) {
	return localcluster.Start(ctx, localcluster.Config{
		Size:            3,
		ElectionTimeout: ElectionTimeout,
		MinTTL:          MinTTL,
		Log:             slog.NewTextHandler(logs, nil),
		RaftLog:         logs,
		Node:            func(cfg *node.Config) { cfg.ApplyTimeout = 5 * time.Second },
	})
}
