package client

import (
	"context"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
)

// KV is one value of the fenced key-value store.
type KV struct {
	Key   string
	Value []byte
	// Lease and Token name the grant that wrote the value.
	Lease string
	Token uint64
	// Revision is the store revision at which the value was written.
	Revision uint64
}

// Put writes value under key, fenced by the grant (leaseName, token): the
// server accepts it only while token is the current, unexpired grant of
// leaseName and no higher token has written key. Otherwise the error
// matches ErrStaleToken. It returns the store revision of the write.
//
// A Put whose answer was lost is retried, like Acquire: every attempt
// carries the call's request ID, and the cluster answers a retry of a
// write that took effect with that write's outcome (its revision), never
// with a second write and never with "stale" because a newer grant wrote
// the key since. A retry the cluster no longer remembers fails with an
// error matching ErrIndeterminate (and ErrNotApplied); read the key to find
// out.
func (c *Client) Put(ctx context.Context, key string, value []byte, leaseName string, token uint64) (uint64, error) {
	id := c.sess.begin()
	defer c.sess.end(id)
	req := &tenurev1.KVPutRequest{Key: key, Value: value, Lease: leaseName, Token: token, RequestId: id}
	res, _, err := unaryOrBatched(ctx, c, retryAlways, req,
		kvService, tenurev1connect.KVServiceClient.Put,
		&tenurev1.BatchOp{Op: &tenurev1.BatchOp_Put{Put: req}}, (*tenurev1.BatchResult).GetPut)
	if err != nil {
		return 0, notApplied(err)
	}
	return res.GetRevision(), nil
}

// KVGet returns the value of key, or an error matching ErrNotFound if the
// key holds none.
func (c *Client) KVGet(ctx context.Context, key string) (KV, error) {
	res, _, err := unary(ctx, c, retryAlways, &tenurev1.KVGetRequest{Key: key},
		kvService, tenurev1connect.KVServiceClient.Get)
	if err != nil {
		return KV{}, err
	}
	return KV{
		Key:      res.GetKey(),
		Value:    res.GetValue(),
		Lease:    res.GetLease(),
		Token:    res.GetToken(),
		Revision: res.GetRevision(),
	}, nil
}

// KVList returns the values of the keys that start with prefix (every
// key for the empty prefix), sorted by key. KeysOnly leaves the values
// out.
func (c *Client) KVList(ctx context.Context, prefix string, opts KVListOptions) ([]KV, error) {
	res, _, err := unary(ctx, c, retryAlways, &tenurev1.KVListRequest{Prefix: prefix, KeysOnly: opts.KeysOnly},
		kvService, tenurev1connect.KVServiceClient.List)
	if err != nil {
		return nil, err
	}
	out := make([]KV, 0, len(res.GetEntries()))
	for _, e := range res.GetEntries() {
		out = append(out, KV{Key: e.GetKey(), Value: e.GetValue(), Lease: e.GetLease(), Token: e.GetToken(), Revision: e.GetRevision()})
	}
	return out, nil
}

// KVListOptions change what KVList returns.
type KVListOptions struct {
	// KeysOnly leaves the values out: Value is nil.
	KeysOnly bool
}

// Delete removes key, fenced like Put, and returns the store revision of
// the deletion. Like Put it is retried until it is answered, at most once
// in effect.
func (c *Client) Delete(ctx context.Context, key, leaseName string, token uint64) (uint64, error) {
	id := c.sess.begin()
	defer c.sess.end(id)
	req := &tenurev1.KVDeleteRequest{Key: key, Lease: leaseName, Token: token, RequestId: id}
	res, _, err := unaryOrBatched(ctx, c, retryAlways, req,
		kvService, tenurev1connect.KVServiceClient.Delete,
		&tenurev1.BatchOp{Op: &tenurev1.BatchOp_Delete{Delete: req}}, (*tenurev1.BatchResult).GetDelete)
	if err != nil {
		return 0, notApplied(err)
	}
	return res.GetRevision(), nil
}
