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
			vs, st := CheckWatches(append(append([]WatchRecord(nil), full...), tt.other...), 2)
			if tt.bad != (len(vs) > 0) {
				t.Fatalf("violations %v, want bad=%v (stats %+v)", vs, tt.bad, st)
			}
		})
	}
}
