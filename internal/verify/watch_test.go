package verify

import "testing"

func wev(node, seg int, typ, name string, token, index uint64) WatchRecord {
	return WatchRecord{Node: node, Seg: seg, Type: typ, Name: name, Token: token, Index: index}
}

// TestCheckWatches: a complete stream, a reset that covers a gap, and the
// negative controls: a stream that silently skipped events (as after a
// snapshot install that did not reset it) and one out of order.
func TestCheckWatches(t *testing.T) {
	full := []WatchRecord{
		wev(0, 1, "synced", "", 0, 0),
		wev(0, 1, "granted", "a", 1, 10),
		wev(0, 1, "expired", "a", 1, 12),
		wev(0, 1, "granted", "a", 2, 15),
		wev(0, 1, "released", "a", 2, 20),
		wev(0, 1, "granted", "a", 3, 22),
	}
	tests := []struct {
		name  string
		other []WatchRecord
		bad   bool
	}{
		{"same stream", []WatchRecord{
			wev(1, 1, "current", "a", 1, 0), wev(1, 1, "synced", "", 0, 0),
			wev(1, 1, "expired", "a", 1, 12), wev(1, 1, "granted", "a", 2, 15),
		}, false},
		{"gap covered by a reset", []WatchRecord{
			wev(1, 1, "synced", "", 0, 0), wev(1, 1, "granted", "a", 1, 10),
			wev(1, 2, "reset", "", 0, 0), wev(1, 2, "current", "a", 3, 0), wev(1, 2, "synced", "", 0, 0),
		}, false},
		{"events skipped without a reset", []WatchRecord{
			wev(1, 1, "synced", "", 0, 0), wev(1, 1, "granted", "a", 1, 10),
			wev(1, 1, "granted", "a", 3, 22),
		}, true},
		{"skipped index between two seen", []WatchRecord{
			wev(1, 1, "current", "a", 1, 0), wev(1, 1, "synced", "", 0, 0),
			wev(1, 1, "expired", "a", 1, 12), wev(1, 1, "granted", "a", 3, 22),
		}, true},
		{"out of order", []WatchRecord{
			wev(1, 1, "synced", "", 0, 0), wev(1, 1, "granted", "a", 2, 15),
			wev(1, 1, "granted", "a", 1, 10),
		}, true},
		{"different events at one index", []WatchRecord{
			wev(1, 1, "synced", "", 0, 0), wev(1, 1, "granted", "a", 7, 10),
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, st := CheckWatches(append(append([]WatchRecord(nil), full...), tt.other...), 2, nil)
			if tt.bad != (len(vs) > 0) {
				t.Fatalf("violations %v, want bad=%v (stats %+v)", vs, tt.bad, st)
			}
		})
	}
}

// TestCheckWatchesSeesClientGrants: a grant a client was told of must be
// in the streams that were open at the time.
func TestCheckWatchesSeesClientGrants(t *testing.T) {
	recs := []WatchRecord{
		{Node: 0, Seg: 1, Type: "synced", At: 0},
		{Node: 0, Seg: 1, Type: "granted", Name: "a", Token: 1, Index: 10, At: 100 * ms},
		{Node: 0, Seg: 1, Type: "released", Name: "a", Token: 1, Index: 11, At: 5000 * ms},
	}
	seen := History{op(0, OpAcquire, "x", 50, 60, Ok, func(r *Record) { r.Name, r.OutToken = "a", 1 })}
	if vs, _ := CheckWatches(recs, 1, seen); len(vs) > 0 {
		t.Fatalf("a grant the stream showed: %v", vs)
	}
	unseen := History{op(0, OpAcquire, "x", 20000, 20010, Ok, func(r *Record) { r.Name, r.OutToken = "a", 2 })}
	recs[2].At = 40000 * ms
	if vs, _ := CheckWatches(recs, 1, unseen); len(vs) == 0 {
		t.Fatal("a grant no open stream showed passed")
	}
}
