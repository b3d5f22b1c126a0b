package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"

	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

// recovery are the flags that start a new one-member cluster from old
// state: a backup (--restore) or this node's own data after the loss of
// a majority (--force-new-cluster). See docs/operations.md.
type recovery struct {
	restore    string
	force      bool
	tokenFloor uint64
}

func (r *recovery) register(fs *flag.FlagSet) {
	fs.StringVar(&r.restore, "restore", "", "start a NEW one-member cluster from the backup `FILE` (tenure snapshot save) in\nthe empty --data-dir; it gets a new cluster ID and tokens above a floor")
	fs.BoolVar(&r.force, "force-new-cluster", false, "start a NEW one-member cluster from this node's own --data-dir after a majority\nof its cluster was lost for good; new cluster ID, tokens above a floor.\nRemove the flag once it started, then add members with --join")
	fs.Uint64Var(&r.tokenFloor, "token-floor", 0, "with --restore or --force-new-cluster: the lowest token the new cluster grants\n(never below the data's last token + 1); default: the clock in microseconds")
}

func (r *recovery) on() bool { return r.restore != "" || r.force }

func (r *recovery) check(o *options) error {
	switch {
	case r.restore != "" && r.force:
		return fmt.Errorf("--restore and --force-new-cluster do not go together")
	case r.tokenFloor > 0 && !r.on():
		return fmt.Errorf("--token-floor goes only with --restore or --force-new-cluster")
	case r.tokenFloor > lease.MaxTokenFloor:
		return fmt.Errorf("--token-floor %d is above the maximum %d", r.tokenFloor, uint64(lease.MaxTokenFloor))
	case !r.on():
		return nil
	case o.dev:
		return fmt.Errorf("%s does not go with --dev (--dev keeps nothing on disk)", r.flag())
	case o.join != "":
		return fmt.Errorf("%s starts a new cluster: it does not go with --join (add members afterwards: they --join it)", r.flag())
	case o.resetDataDir:
		return fmt.Errorf("%s does not go with --reset-data-dir", r.flag())
	}
	if _, port, _ := net.SplitHostPort(r.raftAddr(o)); port == "0" {
		return fmt.Errorf("%s needs a fixed raft port: it records the raft address in the new cluster's configuration", r.flag())
	}
	return nil
}

func (r *recovery) flag() string {
	if r.force {
		return "--force-new-cluster"
	}
	return "--restore"
}

func (r *recovery) raftAddr(o *options) string {
	if o.raftAdvertise != "" {
		return o.raftAdvertise
	}
	return o.raftListen
}

// prepare writes the new cluster's start state into the data directory,
// before the node starts on it.
func (r *recovery) prepare(o *options, log *slog.Logger) error {
	cfg := node.RecoverConfig{DataDir: o.dataDir, NodeID: o.nodeID, RaftAddr: r.raftAddr(o), TokenFloor: r.tokenFloor, Logger: log}
	var (
		res node.RecoverResult
		err error
	)
	if r.restore != "" {
		res, err = node.Restore(cfg, r.restore)
		if err != nil {
			return fmt.Errorf("--restore %s: %w", r.restore, err)
		}
	} else {
		res, err = node.ForceNewCluster(cfg)
		if err != nil {
			return fmt.Errorf("--force-new-cluster: %w", err)
		}
	}
	args := []any{"cluster", res.ClusterID, "old_cluster", res.OldClusterID, "node_id", res.NodeID, "index", res.Index,
		"leases", res.Leases, "last_token", res.LastToken, "next_token", res.NextToken, "token_floor_from", res.FloorFrom}
	if r.restore != "" {
		log.Warn("RESTORED the backup into a NEW one-member cluster with a new cluster ID; members of the old cluster cannot join it, new members join it with --join; clients pinned to the old cluster ID must be pointed at the new one",
			append([]any{"backup", r.restore}, args...)...)
	} else {
		log.Warn("FORCED a NEW one-member cluster from this node's data, with a new cluster ID; remove --force-new-cluster before the next start, and add members with --join (with empty data directories)",
			args...)
	}
	if res.FloorFrom == "last-token" {
		log.Warn("--token-floor is at or below the data's last token; tokens go on from the last token + 1 instead",
			"token_floor", r.tokenFloor, "last_token", res.LastToken, "next_token", res.NextToken)
	}
	return nil
}
