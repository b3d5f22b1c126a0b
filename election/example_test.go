package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

// The examples run against an in-process cluster whose API addresses are
// in endpoints; a program would list its cluster's members, e.g.
// []string{"10.0.0.1:7400", "10.0.0.2:7400", "10.0.0.3:7400"}.

// Leader election: Run campaigns, calls the function while this process
// leads, and campaigns again if the leadership is lost, until its context
// ends.
func ExampleRun() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel() // in a real program: cancelled on SIGTERM

	err = election.Run(ctx, election.RunConfig{
		Client:  c,
		Name:    "example/scheduler",
		Session: election.Config{TTL: 2 * time.Second},
	}, func(ctx context.Context, l *election.Lease) error {
		fmt.Println("leading")
		// Work as the leader until ctx ends, passing l.Token() with every write.
		<-ctx.Done()
		fmt.Println("stepped down")
		return nil
	})
	fmt.Println("Run returned", err)
	// Output:
	// leading
	// stepped down
	// Run returned <nil>
}

// A lock around a job: wait for the lease, run the job under the lease's
// context, release.
func ExampleSession_Acquire() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := election.New(c, election.Config{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	ctx := context.Background()
	l, err := s.Acquire(ctx, "example/jobs/nightly") // waits while another holder has it
	if err != nil {
		log.Fatal(err)
	}
	// The job stops when the lease is at risk of being lost: l.Ctx()
	// ends before the server could grant the lease to anyone else.
	if err := nightlyJob(l.Ctx(), l); err != nil {
		log.Print(err)
	}
	if err := l.Release(ctx); err != nil {
		log.Print(err)
	}
	fmt.Println(l.State())
	// Output:
	// job done with the lease held
	// released
}

func nightlyJob(ctx context.Context, l *election.Lease) error {
	if _, err := l.Put(ctx, "example/jobs/nightly/last-run", []byte("today")); err != nil {
		return err
	}
	fmt.Println("job done with the lease", l.State())
	return ctx.Err()
}

// Passing the token to the built-in fenced store: a holder that lost its
// lease and wakes up late cannot overwrite the next holder's data.
func ExampleLease_Put() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	a, _ := election.New(c, election.Config{Holder: "worker-a", TTL: 2 * time.Second})
	b, _ := election.New(c, election.Config{Holder: "worker-b", TTL: 2 * time.Second})
	defer a.Close(ctx)
	defer b.Close(ctx)

	la, err := a.Acquire(ctx, "example/shard-7")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := la.Put(ctx, "example/shard-7/owner", []byte("a")); err != nil {
		log.Fatal(err)
	}
	la.Release(ctx) // as if a had paused past its lease

	lb, err := b.Acquire(ctx, "example/shard-7")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := lb.Put(ctx, "example/shard-7/owner", []byte("b")); err != nil {
		log.Fatal(err)
	}
	// a wakes up and writes with its old token: refused.
	_, err = c.Put(ctx, "example/shard-7/owner", []byte("a again"), la.Name(), la.Token())
	fmt.Println("a's late write refused:", errors.Is(err, client.ErrStaleToken))
	kv, _ := c.KVGet(ctx, "example/shard-7/owner")
	fmt.Println("value:", string(kv.Value), "written with b's token:", kv.Token == lb.Token())
	// Output:
	// a's late write refused: true
	// value: b written with b's token: true
}

// tokenStore stands for outside storage (a SQL table, a Redis key, a
// file) guarded the way tenure's fence package guards them: a write is
// accepted only if its token is not lower than the highest token the
// store has seen, checked atomically with the write. In SQL:
//
//	UPDATE shards SET data = $1, token = $2 WHERE id = $3 AND token <= $2
type tokenStore struct {
	mu    sync.Mutex
	token uint64
	data  string
}

var errStale = errors.New("stale token")

func (s *tokenStore) write(token uint64, data string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.token {
		return errStale
	}
	s.token, s.data = token, data
	return nil
}

// Passing the token to outside storage: the storage keeps the highest
// token it has seen and refuses writes with lower ones.
func ExampleLease_Token() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	a, _ := election.New(c, election.Config{TTL: 2 * time.Second})
	b, _ := election.New(c, election.Config{TTL: 2 * time.Second})
	defer a.Close(ctx)
	defer b.Close(ctx)
	store := &tokenStore{}

	la, _ := a.Acquire(ctx, "example/table-lock")
	fmt.Println("a writes:", store.write(la.Token(), "a"))
	la.Release(ctx)
	lb, _ := b.Acquire(ctx, "example/table-lock")
	fmt.Println("b writes:", store.write(lb.Token(), "b"))
	fmt.Println("a writes late:", store.write(la.Token(), "a again"))
	// Output:
	// a writes: <nil>
	// b writes: <nil>
	// a writes late: stale token
}

// Observe reports each new leader with its holder and token; Campaign
// waits for the leadership, Resign gives it up.
func ExampleObserve() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders, err := election.Observe(ctx, c, "example/primary")
	if err != nil {
		log.Fatal(err)
	}

	var tokens []uint64
	for _, holder := range []string{"db-1", "db-2"} {
		s, _ := election.New(c, election.Config{Holder: holder, TTL: 2 * time.Second})
		l, err := s.Campaign(ctx, "example/primary")
		if err != nil {
			log.Fatal(err)
		}
		tokens = append(tokens, l.Token())
		l.Resign(ctx)
		s.Close(ctx)
	}
	for i := range 2 {
		ld := <-leaders
		fmt.Printf("%s leads with the token it was granted: %t\n", ld.Holder, ld.Token == tokens[i])
	}
	// Output:
	// db-1 leads with the token it was granted: true
	// db-2 leads with the token it was granted: true
}

// A clean handoff: a candidate with a higher priority asks the leader to
// hand over; the leader's context ends first, then the candidate leads,
// with a larger token, from the moment the old term ended.
func ExampleLease_Handoff() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	a, err := election.New(c, election.Config{Holder: "a", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := election.New(c, election.Config{Holder: "b", TTL: 2 * time.Second, Priority: 10})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)

	la, err := a.Campaign(ctx, "example/handoff")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(la.Holder(), "leads")
	// b waits in the queue; a learns at its next renewal that b asks to
	// take over, and hands off (la.Handoff(ctx, "b") does the same at
	// any time).
	lb, err := b.Campaign(ctx, "example/handoff")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lb.Holder(), "leads")
	<-la.Done() // already ended before b's campaign returned
	fmt.Println("a's term ended:", context.Cause(la.Ctx()))
	fmt.Println("token grew:", lb.Token() > la.Token())
	// Output:
	// a leads
	// b leads
	// a's term ended: election: lease handed off
	// token grew: true
}
