package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDiskFull fills the data directories of a real 3-node cluster (the
// faultfs capacity switch, set to what they use), writes on, reads, and
// gives the space back: writes must be refused with an error that names
// the full disk once the raft log cannot grow, nothing acknowledged may be
// lost, reads must be served while full, no node may exit, and writes
// must work again without a restart. It logs what tenured did while full
// (how many writes it acknowledged, the errors it gave, the ENOSPC the
// disks returned). Evidence of a failure (node logs) stays in the
// directory the failure names.
func TestDiskFull(t *testing.T) {
	bin := buildHarness(t)
	tenured := filepath.Join(filepath.Dir(bin), "tenured")
	dir := evidenceDir(t)
	ctx := context.Background()
	c, err := NewCluster(tenured, filepath.Join(dir, "data"), 3, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c.Extra = nodeFlags
	if err := c.MountDisks(); err != nil {
		t.Fatal(err)
	}
	defer c.UnmountDisks()
	defer c.Close()
	if err := c.Boot(ctx); err != nil {
		t.Fatalf("boot: %v (logs in %s)", err, dir)
	}
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	call := func(f func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return f(cctx)
	}
	var token uint64
	err = call(func(ctx context.Context) error {
		l, err := cl.Acquire(ctx, "disk", "t", time.Minute)
		token = l.Token
		return err
	})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	acked := map[string]string{}
	put := func(key, value string) error {
		err := call(func(ctx context.Context) error { _, err := cl.Put(ctx, key, []byte(value), "disk", token); return err })
		if err == nil {
			acked[key] = value
		}
		return err
	}
	for i := range 20 {
		if err := put(fmt.Sprintf("before-%d", i), "v"); err != nil {
			t.Fatalf("put before the disks fill: %v", err)
		}
	}

	for _, d := range c.Disks {
		d.SetCapacity(d.Usage())
	}
	errs := map[string]int{}
	okFull := 0
	for i := range 150 {
		if err := put(fmt.Sprintf("full-%d", i), "w"); err != nil {
			errs[errText(err)]++
		} else {
			okFull++
		}
	}
	var enospc []int
	for _, d := range c.Disks {
		enospc = append(enospc, d.Stats().ENOSPC)
	}
	t.Logf("while full: %d of 150 small writes acknowledged (the raft log's segment is preallocated); errors %v; ENOSPC returned per disk %v", okFull, errs, enospc)
	// Large values fill the preallocated segment: the next one cannot be
	// made.
	big := strings.Repeat("b", 900<<10)
	errs, okFull = map[string]int{}, 0
	for i := range 90 {
		if err := put(fmt.Sprintf("big-%d", i%4), big); err != nil {
			errs[errText(err)]++
		} else {
			okFull++
		}
	}
	enospc = enospc[:0]
	for _, d := range c.Disks {
		enospc = append(enospc, d.Stats().ENOSPC)
	}
	t.Logf("while full: %d of 90 writes of 900 KiB acknowledged; errors %v; ENOSPC returned per disk %v", okFull, errs, enospc)
	named := 0
	for e, n := range errs {
		if strings.Contains(e, "no space left on device") {
			named += n
		}
	}
	if named == 0 {
		t.Errorf("no write was refused with an error that names the full disk, although the raft log could not grow: errors %v", errs)
	}
	if err := call(func(ctx context.Context) error { _, err := cl.KVGet(ctx, "before-0"); return err }); err != nil {
		t.Errorf("a read while the disks are full: %v", err)
	}
	for i := range c.Nodes {
		if !c.Running(i) {
			t.Errorf("n%d exited while its disk was full (log %s)", i+1, c.Nodes[i].LogPath)
		}
	}

	for _, d := range c.Disks {
		d.SetCapacity(0)
	}
	err = waitFor(ctx, 30*time.Second, "a write to succeed once space returned, without a restart", func() bool {
		return put("after", "x") == nil
	})
	if err != nil {
		t.Errorf("%v (logs in %s)", err, dir)
	}
	for k, v := range acked {
		var got string
		err := retryFor(ctx, 10*time.Second, func() error {
			return call(func(ctx context.Context) error {
				kv, err := cl.KVGet(ctx, k)
				got = string(kv.Value)
				return err
			})
		})
		if err != nil || got != v {
			t.Errorf("acknowledged %s=%q, read %q: %v", k, v, got, err)
		}
	}
	for _, n := range c.Nodes {
		b, _ := os.ReadFile(n.LogPath)
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "no space left") {
				lines = append(lines, l)
			}
		}
		t.Logf("%s: %d log lines name ENOSPC; first: %.300s", n.ID, len(lines), strings.Join(lines[:min(len(lines), 1)], ""))
	}
}
