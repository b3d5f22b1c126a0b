package faultfs

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/raftlog"
)

// TestRaftLogSurvivesCuts hosts internal/raftlog (pwrite, fdatasync,
// fallocate, rename, directory fsync) on a mount: what StoreLogs
// acknowledged survives cuts, across new segments; with NoSync it does
// not (the control).
func TestRaftLogSurvivesCuts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noSync bool
	}{{"synced", false}, {"nosync", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := mount(t)
			dir := filepath.Join(f.Dir(), "raft-log")
			syncPath(t, f.Dir())
			opts := raftlog.Options{SegmentSize: 64 << 10, NoSync: tc.noSync}
			next := uint64(1)
			for round := range 3 {
				st, err := raftlog.Open(dir, opts)
				if err != nil {
					t.Fatalf("round %d: open after a cut: %v", round, err)
				}
				if round == 0 {
					// raftlog syncs the directory it creates only when
					// asked; tenured's data directory is synced at init.
					syncPath(t, f.Dir())
				}
				last, err := st.LastIndex()
				if err != nil {
					t.Fatal(err)
				}
				if !tc.noSync && last != next-1 {
					t.Fatalf("round %d: the log ends at %d after the cut, want %d", round, last, next-1)
				}
				if tc.noSync && round > 0 {
					if last < next-1 {
						st.Close()
						return // acknowledged entries lost, as they must be
					}
				}
				for i := uint64(1); i <= next-1 && !tc.noSync; i++ {
					var l raft.Log
					if err := st.GetLog(i, &l); err != nil || string(l.Data) != fmt.Sprint(i) {
						t.Fatalf("round %d: entry %d: %q, %v", round, i, l.Data, err)
					}
				}
				// Enough entries to fill more than one segment.
				var logs []*raft.Log
				for range 300 {
					logs = append(logs, &raft.Log{Index: next, Term: 1, Data: fmt.Appendf(nil, "%d", next)})
					next++
				}
				for i := 0; i < len(logs); i += 30 {
					if err := st.StoreLogs(logs[i : i+30]); err != nil {
						t.Fatal(err)
					}
				}
				// Close syncs nothing more here (every append was synced,
				// or NoSync skips syncs), and a cut wants the files closed.
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if err := f.Cut(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.noSync {
				t.Fatalf("with NoSync every acknowledged entry survived the cuts")
			}
		})
	}
}
