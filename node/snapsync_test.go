package node

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/faultfs"
)

// TestSnapshotSurvivesPowerLoss writes a snapshot on a faultfs mount and
// cuts the power: through syncedSnapshots the snapshot is whole after the
// cut; through the bare FileSnapshotStore its directory comes back empty
// (bug B7: the store never fsyncs the snapshot's own directory).
func TestSnapshotSurvivesPowerLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		synced bool
		want   int // snapshots listed after the cut
	}{
		{"synced", true, 1},
		{"bare", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			disk, err := faultfs.Mount(filepath.Join(dir, "mnt"), filepath.Join(dir, "disk"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := disk.Unmount(); err != nil {
					t.Error(err)
				}
			}()
			open := func() raft.SnapshotStore {
				fss, err := raft.NewFileSnapshotStore(disk.Dir(), 2, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				if tc.synced {
					return syncedSnapshots{FileSnapshotStore: fss, dir: filepath.Join(disk.Dir(), dirSnapshots)}
				}
				return fss
			}
			store := open()
			// The data directory and snapshots/ are durable, as tenured's
			// initialisation makes them.
			if err := syncDir(filepath.Join(disk.Dir(), dirSnapshots)); err != nil {
				t.Fatal(err)
			}
			if err := syncDir(disk.Dir()); err != nil {
				t.Fatal(err)
			}
			sink, err := store.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sink.Write([]byte("state")); err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
			if err := disk.Cut(); err != nil {
				t.Fatal(err)
			}
			metas, err := open().List()
			if err != nil {
				t.Fatal(err)
			}
			if len(metas) != tc.want {
				t.Fatalf("%d snapshots after the power cut, want %d: %+v", len(metas), tc.want, metas)
			}
		})
	}
}
