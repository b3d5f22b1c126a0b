package client

import tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"

// SetBatchQueueHook makes every endpoint of c call f with its batch
// queue's length whenever a call joins the queue.
func SetBatchQueueHook(c *Client, f func(n int)) {
	for _, ep := range c.endpoints {
		ep.batch.mu.Lock()
		ep.batch.queued = f
		ep.batch.mu.Unlock()
	}
}

// SetBatchSendHook makes every endpoint of c call f with the ops of each
// Batch call just before it is made. Set it before the first call.
func SetBatchSendHook(c *Client, f func(ops []*tenurev1.BatchOp)) {
	for _, ep := range c.endpoints {
		ep.batch.mu.Lock()
		ep.batch.sending = f
		ep.batch.mu.Unlock()
	}
}
