package node

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// Entry kinds: the first byte of every raft command.
const (
	entryBatch     byte = 1 // a lease.Batch (written by older versions)
	entryMember    byte = 2 // a memberInfo as JSON
	entryTermBatch byte = 3 // the raft term it was proposed in (uvarint), then a lease.Batch
	entryCluster   byte = 4 // the cluster ID, written once by the first leader
)

// appendTermBatch encodes b as an entry proposed in raft term term.
func appendTermBatch(buf []byte, term uint64, b lease.Batch) []byte {
	buf = append(buf, entryTermBatch)
	buf = binary.AppendUvarint(buf, term)
	return lease.AppendBatch(buf, b)
}

// memberInfo records the client API address of a raft server, so that any
// node can forward requests to the leader.
type memberInfo struct {
	ID      string `json:"id"`
	APIAddr string `json:"api_addr"`
}

// applyResult is what fsm.Apply returns for a batch entry.
type applyResult struct {
	results []lease.Result
	err     error
}

// fsm adapts lease.State to raft.FSM. Apply runs on raft's FSM goroutine;
// readers take mu.
type fsm struct {
	mu      sync.RWMutex
	st      *lease.State
	members map[string]string // raft ID -> API address
	applied uint64            // index of the last applied entry

	// onApply is called under mu after every applied batch with its events.
	onApply func(index uint64, now time.Duration, events []lease.Event)
	// onRestore is called under mu after a snapshot replaced the state.
	onRestore func()
	// act records what every batch did, for the dashboard.
	act *activityLog
	// waitSynced, if set, waits until the raft log has synced an entry
	// (see synced.go).
	waitSynced func(index uint64) error
	// clusterID is the cluster's ID as the log records it ("" before the
	// first leader recorded it); onCluster is called under mu when it
	// is learnt from the log or a snapshot.
	clusterID string
	onCluster func(id string)
	// onMembers, if set, is called under mu with the members after they
	// changed.
	onMembers func(members map[string]string)
}

func newFSM() *fsm {
	return &fsm{st: lease.New(), members: make(map[string]string), act: newActivityLog()}
}

var _ raft.FSM = (*fsm)(nil)

func encodeMember(m memberInfo) []byte {
	data, _ := json.Marshal(m)
	return append([]byte{entryMember}, data...)
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	if f.waitSynced != nil {
		// See synced.go: a leader applies only what its log synced.
		if err := f.waitSynced(l.Index); err != nil {
			// The entry may be lost from this disk while raft counts it
			// as stored: this node cannot go on safely.
			panic(fmt.Sprintf("node: the raft log failed to sync entry %d: %v", l.Index, err))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	switch l.Data[0] {
	case entryBatch, entryTermBatch:
		data := l.Data[1:]
		proposedIn := l.Term
		if l.Data[0] == entryTermBatch {
			t, n := binary.Uvarint(data)
			if n <= 0 {
				return &applyResult{err: fmt.Errorf("node: entry %d: %w", l.Index, lease.ErrCorrupt)}
			}
			proposedIn, data = t, data[n:]
		}
		b, err := lease.DecodeBatch(data)
		if err != nil {
			return &applyResult{err: fmt.Errorf("node: entry %d: %w", l.Index, err)}
		}
		if proposedIn != l.Term {
			// Stamped with the clock of a leader term that had ended
			// by the time raft appended it: its time is not to be
			// trusted. Cluster time stands still for this batch (Apply
			// never goes backwards). Both terms are in the log, so
			// every replica decides the same.
			b.Now = 0
		}
		results, events := f.st.Apply(b)
		// The entry's wall-clock time is recorded for people to read
		// (the dashboard) and decides nothing: the state knows only
		// cluster time.
		f.act.record(l.Index, l.AppendedAt, f.st, b.Ops, results, events)
		if f.onApply != nil {
			f.onApply(l.Index, f.st.Now(), events)
		}
		return &applyResult{results: results}
	case entryCluster:
		id := string(l.Data[1:])
		if f.clusterID == "" {
			f.clusterID = id
			if f.onCluster != nil {
				f.onCluster(id)
			}
		}
		return &applyResult{}
	case entryMember:
		var m memberInfo
		if err := json.Unmarshal(l.Data[1:], &m); err != nil {
			return &applyResult{err: fmt.Errorf("node: entry %d: %w", l.Index, err)}
		}
		if old, ok := f.members[m.ID]; ok == (m.APIAddr != "") && old == m.APIAddr {
			return &applyResult{}
		}
		if m.APIAddr == "" {
			delete(f.members, m.ID)
		} else {
			f.members[m.ID] = m.APIAddr
		}
		if f.onMembers != nil {
			f.onMembers(f.members)
		}
		return &applyResult{}
	}
	return &applyResult{err: fmt.Errorf("node: entry %d has unknown kind %d", l.Index, l.Data[0])}
}

// fsmSnapshot is the node's snapshot format: a versioned header line with
// the members, then the lease state's own snapshot. Snapshot only
// captures the state (in the FSM's goroutine, so applying waits only for
// that); Persist encodes and writes it in raft's snapshot goroutine.
type fsmSnapshot struct {
	header []byte
	state  *lease.Capture
}

type snapshotHeader struct {
	Version   int               `json:"version"`
	Members   map[string]string `json:"members"`
	ClusterID string            `json:"cluster_id,omitempty"`
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(snapshotHeader{Version: 1, Members: f.members, ClusterID: f.clusterID}); err != nil {
		return nil, err
	}
	return &fsmSnapshot{header: buf.Bytes(), state: f.st.Capture()}, nil
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	_, err := sink.Write(s.header)
	if err == nil {
		err = s.state.Write(sink)
	}
	grants := s.state.Grants()
	// The capture is garbage now (raft keeps s until Release): let it
	// go before the collection below, or that collection keeps it.
	s.state = nil
	if err != nil {
		sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	// The capture and the encoding's garbage are as large as the state:
	// give them back to the operating system now rather than bit by bit,
	// so that memory after a snapshot is the state's, not the snapshot's
	// high-water mark. A small state's garbage is not worth a forced
	// collection.
	if grants >= freeMemoryGrants {
		debug.FreeOSMemory()
	}
	return nil
}

func (s *fsmSnapshot) Release() {}

// freeMemoryGrants is how many grants a snapshot must hold for Persist
// to return its garbage to the operating system at once.
const freeMemoryGrants = 10000

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	dec := json.NewDecoder(rc)
	var h snapshotHeader
	if err := dec.Decode(&h); err != nil {
		return fmt.Errorf("node: read snapshot header: %w", err)
	}
	if h.Version != 1 {
		return fmt.Errorf("node: snapshot version %d is not supported", h.Version)
	}
	st, err := lease.ReadSnapshot(io.MultiReader(dec.Buffered(), rc))
	if err != nil {
		return err
	}
	if h.Members == nil {
		h.Members = make(map[string]string)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st, f.members, f.clusterID = st, h.Members, h.ClusterID
	f.act.reset(f.applied, st.Now(), time.Now())
	if f.clusterID != "" && f.onCluster != nil {
		f.onCluster(f.clusterID)
	}
	if f.onMembers != nil {
		f.onMembers(f.members)
	}
	if f.onRestore != nil {
		f.onRestore()
	}
	return nil
}

// now returns the cluster time of the last applied entry.
func (f *fsm) now() time.Duration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.Now()
}

func (f *fsm) nextDeadline() (time.Duration, bool) {
	f.mu.Lock() // NextDeadline drops stale heap entries
	defer f.mu.Unlock()
	return f.st.NextDeadline()
}

// nextHistorySweep returns when an OpExpire would next sweep the lease
// history (lease.State.NextHistorySweep).
func (f *fsm) nextHistorySweep() (time.Duration, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.NextHistorySweep()
}

// historyRetention returns the lease history's retention in the state.
func (f *fsm) historyRetention() lease.HistoryRetention {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.HistoryRetention()
}

// cluster returns the cluster ID the log records.
func (f *fsm) cluster() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.clusterID
}

func (f *fsm) member(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.members[id]
	return a, ok
}
