package node

// Starting a new one-member cluster from old state: a backup (Restore) or
// a survivor's own data directory after a majority was lost for good
// (ForceNewCluster).
//
// Both write the state the new cluster starts from as a raft snapshot
// whose configuration has one voter, this node, before raft runs. The
// state in that snapshot already has its token counter raised to the
// floor, so nothing can be granted below it: there is no moment in which
// the new cluster serves and the floor is not yet in place.
//
// Why a floor at all. Tokens granted after the data was taken (after the
// backup; or committed by the lost majority and never replicated to the
// survivor) are unknown to the new cluster, and their holders may still
// write with them. The new cluster must grant above every one of them.
// It does not know them, so it uses a bound that holds without knowing
// them: the wall clock in microseconds. tenure grants at far under one
// token per microsecond, and every cluster began at token 1 after the
// Unix epoch, so a token granted at wall time t is at most t in
// microseconds since the epoch; a new cluster started at a later time t'
// starts above every such token. The argument carries over from one
// recovery to the next: a cluster that starts at t' from floor t' still
// grants at most one token a microsecond, so its tokens stay at or below
// the clock. It fails when a clock reads earlier than a time at which
// tokens were granted (a clock set back), and when an explicit floor put
// the tokens above the clock; ChooseTokenFloor refuses both cases it can
// see and asks for an explicit floor instead. The floor is never below
// the data's own highest token plus one.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/tenure-io/tenure/internal/raftlog"
	"github.com/tenure-io/tenure/lease"
)

var (
	// ErrClockFloor is returned by ChooseTokenFloor (and so by Restore
	// and ForceNewCluster) when the clock cannot give a safe token floor:
	// it reads earlier than the data was taken (it went backwards), or
	// the data's tokens are above it. An explicit floor is needed then.
	ErrClockFloor = errors.New("node: the clock gives no safe token floor; give one with --token-floor")
	// ErrNotEmpty is returned by Restore when the data directory holds
	// anything.
	ErrNotEmpty = errors.New("node: the data directory is not empty")
)

// RecoverConfig configures Restore and ForceNewCluster.
type RecoverConfig struct {
	// DataDir is the data directory: empty (or missing) for Restore, the
	// survivor's for ForceNewCluster.
	DataDir string
	// NodeID is the new member's ID. Restore: default RaftAddr.
	// ForceNewCluster: the directory's own ID; another is refused.
	NodeID string
	// RaftAddr is the raft address other members will reach it at.
	// Required.
	RaftAddr string
	// TokenFloor, if not 0, is the lowest token the new cluster grants
	// (raised to the data's last token plus one if below it). 0: the
	// clock's time in microseconds (see ChooseTokenFloor).
	TokenFloor uint64
	// Now reads the wall clock. Default time.Now.
	Now func() time.Time
	// Logger receives what it does. Default slog.Default().
	Logger *slog.Logger
}

// RecoverResult says what Restore or ForceNewCluster made.
type RecoverResult struct {
	NodeID string
	// ClusterID is the new cluster's ID; OldClusterID the data's.
	ClusterID, OldClusterID string
	// Index is the raft index of the state the new cluster starts from.
	Index uint64
	// LastToken is the highest token the data holds; NextToken the first
	// token the new cluster grants.
	LastToken, NextToken uint64
	// FloorFrom says where NextToken came from: "clock", "token-floor"
	// (the explicit floor), or "last-token" (an explicit floor at or
	// below the data's last token).
	FloorFrom string
	// Leases counts the grants the state holds (live or not yet freed).
	Leases int
}

// ChooseTokenFloor returns the first token a cluster started from old
// data may grant. lastToken is the data's highest token; taken is the
// latest wall time the data is known to have been written at (zero if
// unknown). An explicit floor wins, but never goes below lastToken+1.
// Without one, the floor is now in microseconds since the Unix epoch,
// and ErrClockFloor is returned when now is before taken (the clock went
// backwards: tokens may have been granted at clock readings above now)
// or when lastToken is not below it (the tokens were not made under the
// clock's bound).
func ChooseTokenFloor(explicit uint64, now time.Time, lastToken uint64, taken time.Time) (next uint64, from string, err error) {
	if explicit > 0 {
		if explicit <= lastToken {
			return lastToken + 1, "last-token", nil
		}
		return explicit, "token-floor", nil
	}
	if !taken.IsZero() && now.Before(taken) {
		return 0, "", fmt.Errorf("%w: the clock reads %s, earlier than the data was written (%s): it went backwards",
			ErrClockFloor, now.UTC().Format(time.RFC3339Nano), taken.UTC().Format(time.RFC3339Nano))
	}
	us := now.UnixMicro()
	if us <= 0 || uint64(us) <= lastToken {
		return 0, "", fmt.Errorf("%w: the data's last token %d is not below the clock in microseconds (%d), so tokens were not made at under one a microsecond since the epoch",
			ErrClockFloor, lastToken, us)
	}
	return uint64(us), "clock", nil
}

func (c *RecoverConfig) defaults() error {
	if c.DataDir == "" {
		return errors.New("node: a data directory is required")
	}
	if c.RaftAddr == "" {
		return errors.New("node: a raft address is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TokenFloor > lease.MaxTokenFloor {
		return fmt.Errorf("node: token floor %d is above the maximum %d", c.TokenFloor, uint64(lease.MaxTokenFloor))
	}
	return nil
}

// recoverFSM is the FSM raft's recovery runs on: the node's fsm, whose
// snapshot (the state the new cluster starts from) is prepared first:
// the token floor raised, the new cluster ID recorded and the old
// members' API addresses dropped.
type recoverFSM struct {
	*fsm
	cfg       *RecoverConfig
	clusterID string
	taken     time.Time // the latest wall time seen in the data
	res       RecoverResult
}

func (r *recoverFSM) Apply(l *raft.Log) any {
	if l.AppendedAt.After(r.taken) {
		r.taken = l.AppendedAt
	}
	return r.fsm.Apply(l)
}

func (r *recoverFSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := r.prepare(); err != nil {
		return nil, err
	}
	return r.fsm.Snapshot()
}

func (r *recoverFSM) prepare() error {
	f := r.fsm
	f.mu.Lock()
	defer f.mu.Unlock()
	last := f.st.LastToken()
	next, from, err := ChooseTokenFloor(r.cfg.TokenFloor, r.cfg.Now(), last, r.taken)
	if err != nil {
		return err
	}
	if next, err = f.st.RaiseTokenFloor(next); err != nil {
		return err
	}
	r.res.OldClusterID = f.clusterID
	f.clusterID = r.clusterID
	own, ok := f.members[r.cfg.NodeID]
	f.members = make(map[string]string)
	if ok {
		f.members[r.cfg.NodeID] = own
	}
	r.res.LastToken, r.res.NextToken, r.res.FloorFrom = last, next, from
	r.res.Leases = f.st.Len()
	return nil
}

// Restore makes a new one-member cluster in the empty data directory
// cfg.DataDir from the backup file at path: the backup's state, with a
// new cluster ID and a token floor (see ChooseTokenFloor; the backup's
// creation time is when its data was written). It refuses a directory
// that holds anything, and a damaged backup (ErrBackupCorrupt), and then
// changes nothing. The node then starts on the directory as usual.
func Restore(cfg RecoverConfig, path string) (RecoverResult, error) {
	if err := cfg.defaults(); err != nil {
		return RecoverResult{}, err
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.RaftAddr
	}
	b, err := ReadBackup(path)
	if err != nil {
		return RecoverResult{}, err
	}
	entries, err := os.ReadDir(cfg.DataDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return RecoverResult{}, fmt.Errorf("node: read data directory: %w", err)
	case len(entries) > 0:
		return RecoverResult{}, fmt.Errorf("%w: %s holds %s; restore into a new, empty directory", ErrNotEmpty, cfg.DataDir, entries[0].Name())
	}
	// Read and prepare the state before the directory is touched, so a
	// backup that does not restore changes nothing.
	r := &recoverFSM{fsm: newFSM(), cfg: &cfg, clusterID: NewClusterID(), taken: b.Info.Created}
	if err := b.restoreInto(r.fsm); err != nil {
		return RecoverResult{}, err
	}
	snap, err := r.Snapshot()
	if err != nil {
		return RecoverResult{}, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return RecoverResult{}, fmt.Errorf("node: create data directory: %w", err)
	}
	// A restore that fails half way leaves a directory without
	// cluster-id, which tenured refuses; remove it.
	ok := false
	defer func() {
		if !ok {
			clearDir(cfg.DataDir)
		}
	}()
	const term = 1
	if err := writeStartState(cfg, b.Info.Index, term, snap); err != nil {
		return RecoverResult{}, err
	}
	// The IDs last: they mark the directory initialised.
	for _, f := range []struct{ name, id string }{{fileNodeID, cfg.NodeID}, {fileClusterID, r.clusterID}} {
		if err := writeFileSync(filepath.Join(cfg.DataDir, f.name), []byte(f.id+"\n")); err != nil {
			return RecoverResult{}, fmt.Errorf("node: record %s: %w", f.name, err)
		}
	}
	if err := syncDir(cfg.DataDir); err != nil {
		return RecoverResult{}, fmt.Errorf("node: sync data directory: %w", err)
	}
	ok = true
	r.res.NodeID, r.res.ClusterID, r.res.Index = cfg.NodeID, r.clusterID, b.Info.Index
	if r.res.OldClusterID == "" {
		r.res.OldClusterID = b.Info.ClusterID
	}
	return r.res, nil
}

// writeStartState writes the stores of a new data directory: snap as the
// snapshot at index and term with cfg's node as the only voter, term in
// raft.db, and an empty segment log.
func writeStartState(cfg RecoverConfig, index, term uint64, snap raft.FSMSnapshot) error {
	hlog := hclog.NewNullLogger()
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	defer trans.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("node: open snapshot store: %w", err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, term, oneVoter(cfg), 1, trans)
	if err != nil {
		return fmt.Errorf("node: create snapshot: %w", err)
	}
	if err := snap.Persist(sink); err != nil {
		return fmt.Errorf("node: write snapshot: %w", err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, fileRaftDB),
		BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if err != nil {
		return fmt.Errorf("node: create %s: %w", fileRaftDB, err)
	}
	err = bolt.SetUint64(keyCurrentTerm, term)
	if cerr := bolt.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("node: write %s: %w", fileRaftDB, err)
	}
	rl, err := raftlog.Open(filepath.Join(cfg.DataDir, dirRaftLog), raftlog.Options{})
	if err != nil {
		return fmt.Errorf("node: create %s: %w", dirRaftLog, err)
	}
	if err := rl.Close(); err != nil {
		return err
	}
	return syncDir(cfg.DataDir)
}

func oneVoter(cfg RecoverConfig) raft.Configuration {
	return raft.Configuration{Servers: []raft.Server{{
		ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.RaftAddr), Suffrage: raft.Voter,
	}}}
}

// clearDir removes what dir holds, leaving dir.
func clearDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// ForceNewCluster turns the data directory of a survivor of a lost
// majority into a new one-member cluster, as etcd's --force-new-cluster
// does: its state (its latest snapshot and every entry of its log,
// committed or not) becomes a snapshot whose configuration has this node
// as the only voter, its log is emptied, and it gets a new cluster ID.
// The tokens go on from a floor (see ChooseTokenFloor; the latest time
// an entry of its log was appended, or its snapshot made, is when its
// data was written): the survivor may have missed the last grants the
// lost majority committed.
//
// If it fails or is interrupted, run it again: it starts from whatever
// snapshot and log the directory holds (the first run's new snapshot, if
// it got that far, which carries the first floor as its last token, so
// the second floor is not lower).
func ForceNewCluster(cfg RecoverConfig) (RecoverResult, error) {
	if err := cfg.defaults(); err != nil {
		return RecoverResult{}, err
	}
	d, err := openDataDir(cfg.DataDir)
	if err != nil {
		return RecoverResult{}, err
	}
	if !d.initialised {
		return RecoverResult{}, fmt.Errorf("node: data directory %s holds no cluster (no %s): there is nothing to recover; start a new cluster or restore a backup",
			cfg.DataDir, fileClusterID)
	}
	if err := d.checkRaftState(false); err != nil {
		return RecoverResult{}, err
	}
	if cfg.NodeID != "" && cfg.NodeID != d.nodeID {
		return RecoverResult{}, fmt.Errorf("node: data directory %s belongs to node %q, not %q", cfg.DataDir, d.nodeID, cfg.NodeID)
	}
	cfg.NodeID = d.nodeID
	if _, err := os.Stat(filepath.Join(cfg.DataDir, fileCatchingUp)); err == nil {
		// Its state may lack entries the cluster committed. The floor
		// would still keep tokens safe, but the leases and values could
		// be older than what was acknowledged.
		return RecoverResult{}, fmt.Errorf("node: data directory %s: this node had not caught up with its cluster since it joined (%s is there): "+
			"its state may lack acknowledged requests. Force a new cluster from another survivor, or restore a backup; "+
			"to force it from this state all the same, remove %s first",
			cfg.DataDir, fileCatchingUp, filepath.Join(cfg.DataDir, fileCatchingUp))
	}
	hlog := hclog.NewNullLogger()
	rdb, err := d.inspectRaft()
	if err != nil {
		return RecoverResult{}, err
	}
	rl, err := raftlog.Open(filepath.Join(cfg.DataDir, dirRaftLog), raftlog.Options{})
	if err != nil {
		return RecoverResult{}, &DataDirError{Dir: cfg.DataDir, File: dirRaftLog, Problem: "cannot be opened: " + err.Error()}
	}
	defer rl.Close()
	var bolt *raftboltdb.BoltStore
	openBolt := func() error {
		var err error
		bolt, err = raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(cfg.DataDir, fileRaftDB),
			BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
		})
		if err != nil {
			return &DataDirError{Dir: cfg.DataDir, File: fileRaftDB, Problem: "cannot be opened: " + err.Error()}
		}
		return nil
	}
	defer func() {
		if bolt != nil {
			bolt.Close()
		}
	}()
	if rdb.logFile == fileRaftDB {
		// A directory of an older tenure: its log moves first, as at
		// any start.
		if err := openBolt(); err != nil {
			return RecoverResult{}, err
		}
		if err := migrateLog(bolt, rl, cfg.Logger); err != nil {
			return RecoverResult{}, err
		}
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("node: open snapshot store: %w", err)
	}
	// A dry run in memory first, so that a refusal (a clock that gives
	// no safe floor, a state that does not read) changes nothing.
	dry := &recoverFSM{fsm: newFSM(), cfg: &cfg, clusterID: "dry-run"}
	if err := replayState(dry, rl, snaps); err != nil {
		return RecoverResult{}, err
	}
	if err := dry.prepare(); err != nil {
		return RecoverResult{}, err
	}
	if bolt == nil {
		if err := openBolt(); err != nil {
			return RecoverResult{}, err
		}
	}
	// raft.db may keep marks of how far the segment log reached, to
	// refuse a log that lost entries; the log is about to be emptied on
	// purpose (its state goes into the new snapshot), so the marks are
	// reset to promise nothing first. A crash before the log is emptied
	// leaves it whole, with marks that are merely weaker.
	if err := bolt.Set(keyLogMarks, raftlog.LogMarks{}.Bytes()); err != nil {
		return RecoverResult{}, &DataDirError{Dir: cfg.DataDir, File: fileRaftDB, Problem: "cannot be written: " + err.Error()}
	}
	r := &recoverFSM{fsm: newFSM(), cfg: &cfg, clusterID: NewClusterID(), taken: dry.taken}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	defer trans.Close()
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	if err := raft.RecoverCluster(rc, r, rl, bolt, snaps, trans, oneVoter(cfg)); err != nil {
		return RecoverResult{}, fmt.Errorf("node: force a new cluster: %w", err)
	}
	// The new state is in place; now the directory names the new
	// cluster.
	if err := writeFileSync(filepath.Join(cfg.DataDir, fileClusterID), []byte(r.clusterID+"\n")); err != nil {
		return RecoverResult{}, fmt.Errorf("node: record %s: %w", fileClusterID, err)
	}
	if err := syncDir(cfg.DataDir); err != nil {
		return RecoverResult{}, err
	}
	r.res.NodeID, r.res.ClusterID = cfg.NodeID, r.clusterID
	if r.res.OldClusterID == "" {
		r.res.OldClusterID = d.clusterID
	}
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		r.res.Index = metas[0].Index
	}
	return r.res, nil
}

// replayState reads the state the directory holds into r as
// raft.RecoverCluster will: the newest snapshot that restores, then
// every command of the log after it. It notes the newest time the data
// records (the snapshot's creation, the entries' append times) in
// r.taken.
func replayState(r *recoverFSM, logs raft.LogStore, snaps raft.SnapshotStore) error {
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("node: list snapshots: %w", err)
	}
	var index uint64
	for _, m := range metas {
		_, rc, err := snaps.Open(m.ID)
		if err != nil {
			continue
		}
		err = r.fsm.Restore(rc)
		if err != nil {
			continue
		}
		index = m.Index
		var term, idx, ms uint64
		if _, err := fmt.Sscanf(m.ID, "%d-%d-%d", &term, &idx, &ms); err == nil {
			r.taken = time.UnixMilli(int64(ms))
		}
		break
	}
	if len(metas) > 0 && index == 0 {
		return errors.New("node: none of the snapshots can be restored")
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("node: read the log: %w", err)
	}
	for i := index + 1; i <= last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return fmt.Errorf("node: read log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			r.Apply(&l)
		}
	}
	return nil
}
