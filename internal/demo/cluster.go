package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

// cluster is a lease cluster inside this process: three nodes with
// in-memory raft state, a real TCP raft transport and the real API server,
// each on its own loopback port. Workers reach it through the client
// package like any program would.
type cluster struct {
	members []*member
}

// member is one node of the embedded cluster and its API server.
type member struct {
	id      string
	api     string
	node    *node.Node
	srv     *server.Server
	http    *http.Server
	served  chan struct{} // closed when Serve returned
	crashed bool
}

// startCluster starts size nodes: the first bootstraps a cluster, the
// others join it through the leader. It returns once every node sees all
// of them as voters and knows the leader. Logs go to logs (io.Discard for
// none).
func startCluster(ctx context.Context, size int, logs io.Writer) (c *cluster, err error) {
	c = &cluster{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	for i := range size {
		m, err := startMember(fmt.Sprintf("n%d", i+1), i == 0, logs)
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
		if i == 0 {
			if err := m.node.WaitLeader(ctx); err != nil {
				return nil, fmt.Errorf("demo: first node did not become leader: %w", err)
			}
			continue
		}
		if err := c.join(ctx, m); err != nil {
			return nil, err
		}
	}
	if err := c.waitVoters(ctx, size); err != nil {
		return nil, err
	}
	return c, nil
}

func startMember(id string, bootstrap bool, logs io.Writer) (*member, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen for the API of %s: %w", id, err)
	}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id)
	cfg := node.DefaultConfig()
	cfg.ID = id
	cfg.InMemory = true
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.APIAddr = ln.Addr().String()
	cfg.Bootstrap = bootstrap
	cfg.HeartbeatTimeout = ElectionTimeout
	cfg.ElectionTimeout = ElectionTimeout
	cfg.LeaderLeaseTimeout = ElectionTimeout / 2
	cfg.Limits.MinTTL = MinTTL
	cfg.ApplyTimeout = 5 * time.Second
	cfg.Logger = logger
	cfg.RaftLogOutput = logs
	n, err := node.New(cfg)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("demo: start node %s: %w", id, err)
	}
	srv, err := server.New(server.Config{Node: n, Logger: logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		ln.Close()
		n.Abort()
		return nil, fmt.Errorf("demo: start the API server of %s: %w", id, err)
	}
	hs := server.NewHTTPServer(ln.Addr().String(), srv.Handler())
	hs.ErrorLog = log.New(logs, id+" http: ", 0)
	m := &member{id: id, api: ln.Addr().String(), node: n, srv: srv, http: hs, served: make(chan struct{})}
	go func() {
		defer close(m.served)
		hs.Serve(ln)
	}()
	return m, nil
}

// join adds m through the current leader, retrying while leadership
// settles.
func (c *cluster) join(ctx context.Context, m *member) error {
	for {
		var err error
		if l := c.leader(); l == nil {
			err = node.ErrNoLeader
		} else {
			err = l.node.Join(ctx, m.id, m.node.RaftAddr(), m.api)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, node.ErrNotLeader) && !errors.Is(err, node.ErrNoLeader) {
			return fmt.Errorf("demo: join %s: %w", m.id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: join %s: %w", m.id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitVoters waits until every live member sees size voters and a leader
// whose API address it knows.
func (c *cluster) waitVoters(ctx context.Context, size int) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ready := true
		var last string
		for _, m := range c.live() {
			st := m.node.Status()
			voters := 0
			for _, mem := range st.Members {
				if mem.Voter {
					voters++
				}
			}
			if voters != size || st.LeaderAPI == "" {
				ready = false
				last = fmt.Sprintf("%s sees %d of %d voters, leader %q", m.id, voters, size, st.LeaderID)
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: the cluster did not form (%s): %w", last, ctx.Err())
		case <-t.C:
		}
	}
}

// live returns the members that have not crashed.
func (c *cluster) live() []*member {
	var out []*member
	for _, m := range c.members {
		if !m.crashed {
			out = append(out, m)
		}
	}
	return out
}

// leader returns the live member that leads and has taken over, or nil.
func (c *cluster) leader() *member {
	for _, m := range c.live() {
		if m.node.IsLeader() {
			return m
		}
	}
	return nil
}

// waitLeader waits until some live member leads.
func (c *cluster) waitLeader(ctx context.Context) (*member, error) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if l := c.leader(); l != nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("demo: no new leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// endpoints returns the API addresses of all members, crashed or not: a
// client is configured once and finds the live ones itself.
func (c *cluster) endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.api
	}
	return out
}

// crash stops m as abruptly as a process can stop in-process: its API
// server drops every connection and its node stops without handing
// leadership over.
func (c *cluster) crash(m *member) {
	m.crashed = true
	m.http.Close()
	<-m.served
	m.node.Abort()
	m.srv.Close()
}

// close stops every live member.
func (c *cluster) close() {
	for _, m := range c.live() {
		c.crash(m)
	}
}
