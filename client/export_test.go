package client

// SetBatchQueueHook makes every endpoint of c call f with its batch
// queue's length whenever a call joins the queue.
func SetBatchQueueHook(c *Client, f func(n int)) {
	for _, ep := range c.endpoints {
		ep.batch.mu.Lock()
		ep.batch.queued = f
		ep.batch.mu.Unlock()
	}
}
