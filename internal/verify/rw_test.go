package verify

import "testing"

func sev(node, seg int, typ, name string, token, index uint64, shared bool) WatchRecord {
	r := wev(node, seg, typ, name, token, index)
	r.Shared = shared
	return r
}

// TestCheckWatchesRW: shared grants overlap each other; an exclusive grant
// that overlaps any grant, or a shared one that overlaps an exclusive
// grant, is an rw-exclusion violation.
func TestCheckWatchesRW(t *testing.T) {
	tests := []struct {
		name string
		recs []WatchRecord
		bad  bool
	}{
		{"readers, then a writer, then readers", []WatchRecord{
			wev(0, 1, "synced", "", 0, 0),
			sev(0, 1, "granted", "rw", 1, 10, true), sev(0, 1, "granted", "rw", 2, 11, true),
			sev(0, 1, "released", "rw", 1, 12, true), sev(0, 1, "expired", "rw", 2, 13, true),
			sev(0, 1, "granted", "rw", 3, 13, false), sev(0, 1, "released", "rw", 3, 14, false),
			sev(0, 1, "granted", "rw", 4, 14, true), sev(0, 1, "granted", "rw", 5, 14, true),
		}, false},
		{"current readers, another reader", []WatchRecord{
			sev(0, 1, "current", "rw", 1, 0, true), sev(0, 1, "current", "rw", 2, 0, true), wev(0, 1, "synced", "", 0, 0),
			sev(0, 1, "granted", "rw", 3, 10, true),
		}, false},
		{"a writer while a reader holds", []WatchRecord{
			wev(0, 1, "synced", "", 0, 0),
			sev(0, 1, "granted", "rw", 1, 10, true), sev(0, 1, "granted", "rw", 2, 11, false),
		}, true},
		{"a reader while a writer holds", []WatchRecord{
			wev(0, 1, "synced", "", 0, 0),
			sev(0, 1, "granted", "rw", 1, 10, false), sev(0, 1, "granted", "rw", 2, 11, true),
		}, true},
		{"current writer and reader", []WatchRecord{
			sev(0, 1, "current", "rw", 1, 0, false), sev(0, 1, "current", "rw", 2, 0, true), wev(0, 1, "synced", "", 0, 0),
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, _ := CheckWatches(tt.recs, 1, nil)
			if tt.bad != (len(vs) > 0) {
				t.Fatalf("violations %v, want bad=%v", vs, tt.bad)
			}
			for _, v := range vs {
				if v.Invariant != InvRWExclusion {
					t.Fatalf("violation %v, want %s", v, InvRWExclusion)
				}
			}
		})
	}
}

func TestCheckRW(t *testing.T) {
	h := History{
		{Op: OpRWAcquire, Name: "rw", Shared: true, Outcome: Ok, OutToken: 1},
		{Op: OpRWPut, Name: "rw", Token: 1, Shared: true, Outcome: Failed},
		{Op: OpRWAcquire, Name: "rw", Outcome: Ok, OutToken: 2},
		{Op: OpRWPut, Name: "rw", Token: 2, Outcome: Ok},
	}
	vs, st := CheckRW(h)
	if len(vs) != 0 || st.Acquires != 2 || st.Shared != 1 || st.Excl != 1 || st.Writes != 2 || st.Refused != 1 {
		t.Fatalf("CheckRW = %v, %+v", vs, st)
	}
	h = append(h, Record{Op: OpRWPut, Name: "rw", Token: 1, Shared: true, Outcome: Ok})
	if vs, _ := CheckRW(h); len(vs) != 1 || vs[0].Invariant != InvSharedNoWrite {
		t.Fatalf("an accepted shared write: %v", vs)
	}
	// The workload's records are left out of what porcupine checks.
	if leases, terms := h.Split(); len(leases) != 0 || len(terms) != 0 {
		t.Fatalf("Split kept %v and %v", leases, terms)
	}
}
