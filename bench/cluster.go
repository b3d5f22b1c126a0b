package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// system names the two servers under test.
type system string

const (
	etcdSys   system = "etcd"
	tenureSys system = "tenure"
)

// cluster is a running etcd or tenure cluster of real processes on
// loopback, each node with its own fresh data directory.
type cluster struct {
	sys       system
	dir       string
	endpoints []string // client API addresses, host:port
	ids       []string // node names: n1, n2, ...
	nodes     []*proc
}

// startCluster starts n nodes of sys with data under a new directory in
// root and waits until every node serves requests.
func startCluster(ctx context.Context, sys system, bins binaries, root string, n int, extra []string) (*cluster, error) {
	dir, err := os.MkdirTemp(root, fmt.Sprintf("%s-%dn-", sys, n))
	if err != nil {
		return nil, err
	}
	c := &cluster{sys: sys, dir: dir}
	var start func(context.Context, binaries, []string) error
	switch sys {
	case etcdSys:
		start = c.startEtcd
	case tenureSys:
		start = c.startTenure
	}
	for i := range n {
		api, err := freeAddr()
		if err != nil {
			return nil, err
		}
		c.endpoints = append(c.endpoints, api)
		c.ids = append(c.ids, fmt.Sprintf("n%d", i+1))
	}
	if err := start(ctx, bins, extra); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *cluster) startEtcd(ctx context.Context, bins binaries, extra []string) error {
	peers := make([]string, len(c.ids))
	var initial []string
	for i, id := range c.ids {
		p, err := freeAddr()
		if err != nil {
			return err
		}
		peers[i] = "http://" + p
		initial = append(initial, id+"="+peers[i])
	}
	token := filepath.Base(c.dir)
	for i, id := range c.ids {
		args := []string{
			"--name", id,
			"--data-dir", filepath.Join(c.dir, id),
			"--listen-client-urls", "http://" + c.endpoints[i],
			"--advertise-client-urls", "http://" + c.endpoints[i],
			"--listen-peer-urls", peers[i],
			"--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--log-level", "warn",
		}
		p, err := startProc("etcd "+id, bins.etcd, append(args, extra...), filepath.Join(c.dir, id+".log"))
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, p)
	}
	cl, err := c.etcdClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	return waitFor(ctx, 30*time.Second, "every etcd member to answer with a leader", func() bool {
		for _, ep := range c.endpoints {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, ep)
			cancel()
			if err != nil || st.Leader == 0 {
				return false
			}
		}
		return true
	})
}

func (c *cluster) startTenure(ctx context.Context, bins binaries, extra []string) error {
	for i, id := range c.ids {
		raftAddr, err := freeAddr()
		if err != nil {
			return err
		}
		args := []string{
			"--node-id", id,
			"--listen", c.endpoints[i],
			"--raft-listen", raftAddr,
			"--data-dir", filepath.Join(c.dir, id),
		}
		if i > 0 {
			args = append(args, "--join", c.endpoints[0])
		}
		args = append(append(args, bins.tenuredFlags...), extra...)
		p, err := startProc("tenured "+id, bins.tenured, args, filepath.Join(c.dir, id+".log"))
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, p)
		if i == 0 {
			if err := waitFor(ctx, 30*time.Second, "the first tenured to be ready", func() bool { return tenureReady(c.endpoints[0]) }); err != nil {
				return err
			}
		}
	}
	cl, err := c.tenureClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	// Joiners start as non-voters; measure only a cluster of voters.
	return waitFor(ctx, 60*time.Second, "every tenured to join as a voter and be ready", func() bool {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Status(sctx)
		cancel()
		if err != nil || len(st.Members) != len(c.ids) {
			return false
		}
		for _, m := range st.Members {
			if m.Suffrage != "voter" {
				return false
			}
		}
		for _, ep := range c.endpoints {
			if !tenureReady(ep) {
				return false
			}
		}
		return true
	})
}

func tenureReady(api string) bool {
	hc := http.Client{Timeout: time.Second}
	res, err := hc.Get("http://" + api + "/readyz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// etcdClient returns a client of every member.
func (c *cluster) etcdClient() (*clientv3.Client, error) {
	return newEtcdClient(c.endpoints)
}

func newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      quietLogger(),
	})
}

// tenureClient returns a client of every member.
func (c *cluster) tenureClient() (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = c.endpoints
	return client.New(cfg)
}

// pids returns the process IDs of the live nodes.
func (c *cluster) pids() []int {
	var out []int
	for _, p := range c.nodes {
		if p.alive() {
			out = append(out, p.pid())
		}
	}
	return out
}

// leader returns the index of the current leader, asking every live node.
func (c *cluster) leader(ctx context.Context) (int, error) {
	switch c.sys {
	case etcdSys:
		cl, err := c.etcdClient()
		if err != nil {
			return 0, err
		}
		defer cl.Close()
		for i, ep := range c.endpoints {
			if !c.nodes[i].alive() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx, ep)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i, nil
			}
		}
	case tenureSys:
		for i, ep := range c.endpoints {
			if !c.nodes[i].alive() {
				continue
			}
			cfg := client.DefaultConfig()
			cfg.Endpoints = []string{ep}
			cl, err := client.New(cfg)
			if err != nil {
				return 0, err
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.Status(sctx)
			cancel()
			cl.Close()
			if err == nil && st.State == "leader" {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no node reports itself leader", c.sys)
}

// stop kills every node. The data directory stays until the run ends.
func (c *cluster) stop() {
	for _, p := range c.nodes {
		p.kill()
	}
}

// close stops the cluster and removes its data unless keep is set.
func (c *cluster) close(keep bool) {
	c.stop()
	if !keep {
		os.RemoveAll(c.dir)
	}
}
