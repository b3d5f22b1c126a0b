package main

import (
	"context"
	"time"

	"github.com/tenure-io/tenure/client"
)

// call runs f with a client to the endpoints, under the request timeout
// plus extra.
func (a *app) call(ctx context.Context, extra time.Duration, f func(ctx context.Context, cl *client.Client) error) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := a.withTimeout(ctx, extra)
	defer cancel()
	return f(ctx, cl)
}
