package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
)

// snapshotChunk is the most bytes one message of a Snapshot stream
// carries.
const snapshotChunk = 256 << 10

// Snapshot streams a backup of the cluster's state. The leader takes it
// (node.Backup: after a barrier, with a header and a checksum); a
// follower relays the leader's stream.
func (c *clusterService) Snapshot(ctx context.Context, req *connect.Request[tenurev1.SnapshotRequest], stream *connect.ServerStream[tenurev1.SnapshotResponse]) error {
	p, err := c.s.leaderClients(req.Header())
	if err != nil {
		return err
	}
	if p != nil {
		return c.relaySnapshot(ctx, p, req, stream)
	}
	w := &chunkWriter{send: stream.Send}
	info, err := c.s.node.Backup(ctx, w)
	if err != nil {
		if w.sent > 0 {
			// The stream has begun: whatever the cause, the client
			// holds part of a backup and must not keep it.
			return connect.NewError(connect.CodeAborted, errors.New("server: the backup failed part way: "+err.Error()))
		}
		return toConnect(err)
	}
	c.s.log.Info("sent a backup", "index", info.Index, "last_token", info.LastToken, "bytes", w.sent, "principal", principalFrom(ctx))
	return nil
}

// relaySnapshot passes the leader's Snapshot stream on.
func (c *clusterService) relaySnapshot(ctx context.Context, p *peerClients, req *connect.Request[tenurev1.SnapshotRequest], stream *connect.ServerStream[tenurev1.SnapshotResponse]) error {
	in, err := p.cluster.Snapshot(ctx, outgoing(ctx, c.s, req))
	if err != nil {
		return relayError(err)
	}
	defer in.Close()
	for in.Receive() {
		if err := stream.Send(in.Msg()); err != nil {
			return err
		}
	}
	if err := in.Err(); err != nil {
		return relayError(err)
	}
	return nil
}

func relayError(err error) error {
	if ce, ok := errors.AsType[*connect.Error](err); ok && connect.IsWireError(ce) {
		return ce
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("server: relaying the leader's backup: "+err.Error()))
}

// chunkWriter sends what is written to it as SnapshotResponse chunks of
// at most snapshotChunk bytes.
type chunkWriter struct {
	send func(*tenurev1.SnapshotResponse) error
	sent int64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), snapshotChunk)
		if err := w.send(&tenurev1.SnapshotResponse{Chunk: p[:k]}); err != nil {
			return n, err
		}
		n += k
		w.sent += int64(k)
		p = p[k:]
	}
	return n, nil
}
