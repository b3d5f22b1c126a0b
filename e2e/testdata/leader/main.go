// Command leader is a small program for the end-to-end tests: it runs
// election.Run on one name and prints when it starts and stops leading,
// writing a fenced heartbeat while it leads. It is also a complete, if
// tiny, example of a leader-elected service.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7400", "comma-separated API addresses")
	name := flag.String("name", "svc/leader", "lease to lead")
	holder := flag.String("holder", "", "holder name (default: HOSTNAME-PID-RANDOM)")
	ttl := flag.Duration("ttl", 2*time.Second, "lease TTL")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := client.New(client.Config{Endpoints: strings.Split(*endpoints, ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer c.Close()

	cfg := election.RunConfig{
		Client:  c,
		Name:    *name,
		Session: election.Config{Holder: *holder, TTL: *ttl},
		OnNewLeader: func(l election.Leader) {
			fmt.Printf("new leader %s token=%d\n", l.Holder, l.Token)
		},
	}
	err = election.Run(ctx, cfg, func(ctx context.Context, l *election.Lease) error {
		fmt.Printf("leading token=%d\n", l.Token())
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				fmt.Printf("stopped token=%d: %v\n", l.Token(), context.Cause(ctx))
				return nil
			case <-tick.C:
				// Every write carries the token: a stale leader's is refused.
				if _, err := l.Put(ctx, *name+"/heartbeat", []byte(l.Holder())); err != nil && ctx.Err() == nil {
					fmt.Printf("write refused: %v\n", err)
				}
			}
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
