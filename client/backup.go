package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
)

// Snapshot writes a backup of the cluster's state to w, as the leader
// takes it: the state after every request acknowledged before the call,
// with a header and a SHA-256 checksum (the format is in
// docs/operations.md; tenured --restore reads it). It needs the admin
// role. It returns the bytes written. An attempt that fails before the
// first byte arrived is retried on other endpoints; a failure after that
// ends the call, and w holds part of a backup, which must not be kept.
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	var n int64
	err := c.call(ctx, retryAlways, func(ctx context.Context, ep *endpoint) error {
		stream, err := ep.cluster.Snapshot(ctx, connect.NewRequest(&tenurev1.SnapshotRequest{}))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
			k, err := w.Write(stream.Msg().GetChunk())
			n += int64(k)
			if err != nil {
				return fmt.Errorf("client: write the backup: %w", err)
			}
		}
		switch err := stream.Err(); {
		case err != nil && n > 0:
			// A plain error (%v, not %w) is never retried: w holds
			// part of a backup.
			return fmt.Errorf("client: the backup broke off after %d bytes: %v", n, err)
		case err != nil:
			return err
		case n == 0:
			return errors.New("client: the server sent an empty backup")
		}
		return nil
	})
	return n, err
}
