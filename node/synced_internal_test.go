package node

import (
	"errors"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func TestOnlyTheLeadersCommandsDeferTheirSync(t *testing.T) {
	logs := func(types ...raft.LogType) []*raft.Log {
		var out []*raft.Log
		for i, ty := range types {
			out = append(out, &raft.Log{Index: uint64(i + 1), Type: ty})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		state raft.RaftState
		logs  []*raft.Log
		want  bool
	}{
		{"leader, commands", raft.Leader, logs(raft.LogCommand, raft.LogCommand), true},
		{"leader, noop and barrier", raft.Leader, logs(raft.LogNoop, raft.LogBarrier, raft.LogCommand), true},
		{"leader, a configuration among commands", raft.Leader, logs(raft.LogCommand, raft.LogConfiguration), false},
		{"follower", raft.Follower, logs(raft.LogCommand), false},
		{"candidate", raft.Candidate, logs(raft.LogCommand), false},
		{"shut down", raft.Shutdown, logs(raft.LogCommand), false},
	} {
		if got := deferSync(tc.state, tc.logs); got != tc.want {
			t.Errorf("%s: deferSync = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStableStoreSyncsTheLogFirst: a new term or a vote is recorded only
// after the raft log synced what it deferred.
func TestStableStoreSyncsTheLogFirst(t *testing.T) {
	var order []string
	s := syncingStable{
		StableStore: recordingStable{order: &order},
		sync:        func() error { order = append(order, "sync"); return nil },
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	want := []string{"sync", "set CurrentTerm", "sync", "set LastVoteCand"}
	if !slices.Equal(order, want) {
		t.Fatalf("order = %q, want %q", order, want)
	}
	failing := syncingStable{StableStore: recordingStable{order: &order}, sync: func() error { return errors.New("disk gone") }}
	order = nil
	if err := failing.SetUint64([]byte("CurrentTerm"), 8); err == nil || len(order) != 0 {
		t.Fatalf("SetUint64 with a failing sync = %v and recorded %q; want the error and nothing recorded", err, order)
	}
}

type recordingStable struct {
	raft.StableStore
	order *[]string
}

func (r recordingStable) Set(key, _ []byte) error {
	*r.order = append(*r.order, "set "+string(key))
	return nil
}

func (r recordingStable) SetUint64(key []byte, _ uint64) error {
	*r.order = append(*r.order, "set "+string(key))
	return nil
}
