package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// failoverTrial is one SIGKILL of the leader of a fresh 3-node cluster.
type failoverTrial struct {
	System system `json:"system"`
	Trial  int    `json:"trial"`
	// RenewS is the time from the SIGKILL to the first renewal of the
	// lease taken before it that succeeded, in seconds; GrantS to the
	// first grant of a new lease.
	RenewS float64 `json:"renew_s"`
	GrantS float64 `json:"grant_s"`
	// Survived: the renewal succeeded for the same lease (etcd: the same
	// lease ID, TTL > 0; tenure: the same token), which was not reported
	// lost or stale.
	Survived bool   `json:"survived"`
	Token    uint64 `json:"token"`
	Err      string `json:"error,omitempty"`
}

// attemptTimeout bounds each renewal or grant attempt after the kill; a
// failed attempt is retried at once (10ms later if it failed at once).
const attemptTimeout = time.Second

// failoverGiveUp bounds one trial after the kill.
const failoverGiveUp = 30 * time.Second

func runFailover(ctx context.Context, sys system, bins binaries, root string, trial int, keep bool) (failoverTrial, error) {
	res := failoverTrial{System: sys, Trial: trial}
	cl, err := startCluster(ctx, sys, bins, root, 3, nil)
	if err != nil {
		return res, err
	}
	defer cl.close(keep)
	var renew, grant func(ctx context.Context) (ok, lost bool, token uint64)
	switch sys {
	case etcdSys:
		c, err := cl.etcdClient()
		if err != nil {
			return res, err
		}
		defer c.Close()
		g, err := c.Grant(ctx, int64(benchTTL/time.Second))
		if err != nil {
			return res, err
		}
		res.Token = uint64(g.ID)
		renew = func(ctx context.Context) (bool, bool, uint64) {
			r, err := c.KeepAliveOnce(ctx, g.ID)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return false, true, 0
			}
			return err == nil && r.TTL > 0, false, uint64(g.ID)
		}
		grant = func(ctx context.Context) (bool, bool, uint64) {
			r, err := c.Grant(ctx, int64(benchTTL/time.Second))
			if err != nil {
				return false, false, 0
			}
			return true, false, uint64(r.ID)
		}
	case tenureSys:
		c, err := cl.tenureClient()
		if err != nil {
			return res, err
		}
		defer c.Close()
		l, err := c.Acquire(ctx, "failover/held", "holder", benchTTL)
		if err != nil {
			return res, err
		}
		res.Token = l.Token
		renew = func(ctx context.Context) (bool, bool, uint64) {
			r, err := c.RenewOne(ctx, l.Name, l.Token)
			if errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound) {
				return false, true, 0
			}
			return err == nil, false, r.Token
		}
		grant = func(ctx context.Context) (bool, bool, uint64) {
			r, err := c.Acquire(ctx, "failover/next", "holder", benchTTL)
			return err == nil, false, r.Token
		}
	}
	leader, err := cl.leader(ctx)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	cl.nodes[leader].kill()
	type outcome struct {
		at         time.Duration
		lost       bool
		token      uint64
		grant, bad bool
	}
	done := make(chan outcome, 2)
	tctx, cancel := context.WithTimeout(ctx, failoverGiveUp)
	defer cancel()
	for _, f := range []struct {
		call  func(context.Context) (bool, bool, uint64)
		grant bool
	}{{renew, false}, {grant, true}} {
		go func() {
			for tctx.Err() == nil {
				a0 := time.Now()
				actx, acancel := context.WithTimeout(tctx, attemptTimeout)
				ok, lost, token := f.call(actx)
				acancel()
				if ok || lost {
					done <- outcome{at: time.Since(t0), lost: lost, token: token, grant: f.grant}
					return
				}
				if time.Since(a0) < 10*time.Millisecond {
					time.Sleep(10 * time.Millisecond)
				}
			}
			done <- outcome{grant: f.grant, bad: true}
		}()
	}
	for range 2 {
		o := <-done
		switch {
		case o.bad:
			res.Err = fmt.Sprintf("no success within %s (grant=%v)", failoverGiveUp, o.grant)
		case o.grant:
			res.GrantS = o.at.Seconds()
		default:
			res.RenewS = o.at.Seconds()
			res.Survived = !o.lost && o.token == res.Token
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// memoryMeasure is the RSS one server process grew by while holding n
// live leases.
type memoryMeasure struct {
	System   system  `json:"system"`
	Leases   int     `json:"leases"`
	RSS0     int64   `json:"rss_before_bytes"`
	RSS1     int64   `json:"rss_after_bytes"`
	PerLease float64 `json:"bytes_per_lease"`
	SetupS   float64 `json:"setup_s"`
	// Snapshot: tenure took a snapshot while or after the leases were
	// granted; the suite waits up to 10s after the last grant for one
	// (always false for etcd, whose own snapshots are not awaited).
	Snapshot bool `json:"snapshot"`
}

// memoryTTL keeps the leases of the memory workload alive through it.
const memoryTTL = time.Hour

// runMemory grants n leases with a TTL of an hour on a fresh single node
// and reads the server's RSS before and after (tenure: after the snapshot
// that follows the last grant).
func runMemory(ctx context.Context, sys system, bins binaries, root string, n, workers int, keep bool) (memoryMeasure, error) {
	res := memoryMeasure{System: sys, Leases: n}
	var extra []string
	if sys == tenureSys {
		extra = []string{"--snapshot-interval", "1s", "--snapshot-threshold", "1024"}
	}
	cl, err := startCluster(ctx, sys, bins, root, 1, extra)
	if err != nil {
		return res, err
	}
	defer cl.close(keep)
	settle := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return nil
		}
	}
	if err := settle(); err != nil {
		return res, err
	}
	pid := cl.nodes[0].pid()
	if res.RSS0, err = rssBytes(pid); err != nil {
		return res, err
	}
	t0 := time.Now()
	switch sys {
	case etcdSys:
		c, err := cl.etcdClient()
		if err != nil {
			return res, err
		}
		defer c.Close()
		err = parallel(ctx, workers, n, func(ctx context.Context, i int) error {
			_, err := c.Grant(ctx, int64(memoryTTL/time.Second))
			return err
		})
		if err != nil {
			return res, err
		}
	case tenureSys:
		c, err := cl.tenureClient()
		if err != nil {
			return res, err
		}
		defer c.Close()
		err = parallel(ctx, workers, n, func(ctx context.Context, i int) error {
			_, err := c.Acquire(ctx, fmt.Sprintf("mem/%d", i), fmt.Sprintf("h%d", i%1000), memoryTTL)
			return err
		})
		if err != nil {
			return res, err
		}
		loaded := time.Now()
		res.SetupS = loaded.Sub(t0).Seconds()
		snaps := filepath.Join(cl.dir, cl.ids[0], "snapshots")
		// A snapshot being written is a directory named *.tmp until
		// raft renames it: wait for a finished one.
		finishedAfter := func(t time.Time) bool {
			ents, _ := os.ReadDir(snaps)
			for _, e := range ents {
				if info, err := e.Info(); err == nil && !strings.HasSuffix(e.Name(), ".tmp") && info.ModTime().After(t) {
					return true
				}
			}
			return false
		}
		waitFor(ctx, time.Minute, "a finished snapshot after the last grant", func() bool { return finishedAfter(loaded) })
		res.Snapshot = finishedAfter(t0)
		// That snapshot may have begun before the last grants, and
		// the next one, of the rest, then copies the state while the
		// RSS is read: measure once a settling time passed with no
		// snapshot begun or finished (at most a minute more).
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			before := snapshotDirs(snaps)
			if err := settle(); err != nil {
				return res, err
			}
			if slices.Equal(before, snapshotDirs(snaps)) && !slices.ContainsFunc(before, func(n string) bool { return strings.HasSuffix(n, ".tmp") }) {
				break
			}
		}
	}
	if res.SetupS == 0 {
		res.SetupS = time.Since(t0).Seconds()
	}
	if sys == etcdSys {
		if err := settle(); err != nil {
			return res, err
		}
	}
	if res.RSS1, err = rssBytes(pid); err != nil {
		return res, err
	}
	res.PerLease = float64(res.RSS1-res.RSS0) / float64(n)
	return res, nil
}

// snapshotDirs returns the names in a node's snapshot directory: the
// finished snapshots, and one named *.tmp while one is being written.
func snapshotDirs(dir string) []string {
	ents, _ := os.ReadDir(dir)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names
}
