package localcluster_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tenure-io/tenure/internal/testcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Members on TCP come back from their data directories on the same
// addresses: one at a time, and all together.
func TestRestartOnTCP(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{Size: 3, DataDir: t.TempDir()})
	old := c.Leader()
	addr := old.Addr
	c.Crash(old)
	c.Leader()
	if err := c.Cluster.Partition(old); err == nil {
		t.Error("Partition on TCP did not fail")
	}
	c.Restart(old)
	if old.Addr != addr {
		t.Errorf("restarted %s serves at %s, not at %s", old.ID, old.Addr, addr)
	}
	c.Leader()

	for _, m := range c.Members() {
		c.Stop(m)
	}
	for _, m := range c.Members() {
		c.Restart(m)
	}
	c.Leader()
}
