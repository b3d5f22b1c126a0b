package server_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// A client's batches travel on one BatchStream that lasts as long as the
// client: the body limits bound each message, not the stream's total.
// 8 MiB of fenced writes through one client, each 256 KiB, all succeed
// (a limit on the whole body cut the stream after 64 KiB).
func TestBatchStreamHasNoTotalLimit(t *testing.T) {
	// One node: the test is about the stream, and a 3-node cluster on a
	// loaded machine may change leaders mid-put (an indeterminate answer).
	c := testcluster.Start(t, testcluster.Config{Size: 1, ElectionTimeout: 300 * time.Millisecond, MinTTL: time.Second})
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{c.Leader().Addr}
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t)
	l, err := cl.Acquire(ctx, "big/writer", "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("x"), 256<<10)
	for i := range 32 {
		if _, err := cl.Put(ctx, fmt.Sprintf("big/%d", i), value, l.Name, l.Token); err != nil {
			t.Fatalf("put %d (%d KiB sent on the stream so far): %v", i, i*256, err)
		}
	}
}
