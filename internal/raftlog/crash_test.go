package raftlog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// crashChildEnv makes the test binary a writer that appends to the store
// in the directory it names, printing each acknowledged last index, until
// it is killed. With crashDeferEnv set it defers its syncs, and
// acknowledges an entry once WaitSynced says it is synced, as a leader
// acts on an entry only then.
const (
	crashChildEnv = "RAFTLOG_CRASH_CHILD"
	crashDeferEnv = "RAFTLOG_CRASH_DEFER"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

func crashChild(dir string) {
	opts := Options{SegmentSize: 64 << 10}
	deferred := os.Getenv(crashDeferEnv) != ""
	if deferred {
		opts.DeferSync = func([]*raft.Log) bool { return true }
	}
	st, err := Open(dir, opts)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	next, _ := st.LastIndex()
	next++
	out := bufio.NewWriter(os.Stdout)
	for batch := 1; ; batch++ {
		var logs []*raft.Log
		for range batch%7 + 1 {
			logs = append(logs, entry(next))
			next++
		}
		if err := st.StoreLogs(logs); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if deferred {
			if batch%3 != 0 {
				continue // leave some appends to the syncer alone
			}
			if err := st.WaitSynced(next - 1); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		}
		fmt.Fprintln(out, "acked", next-1)
		out.Flush()
	}
}

// SIGKILL a writer in the middle of its appends, again and again: every
// acknowledged entry is there after each restart, and the log stays whole.
func TestCrashKeepsAcknowledgedEntries(t *testing.T) {
	t.Run("synced", func(t *testing.T) { crashRounds(t, false) })
	t.Run("deferred", func(t *testing.T) { crashRounds(t, true) })
}

func crashRounds(t *testing.T, deferred bool) {
	dir := t.TempDir()
	var acked uint64
	for round := range 8 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		if deferred {
			cmd.Env = append(cmd.Env, crashDeferEnv+"=1")
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		want := 200 + round*97 // acknowledgements to read before the kill
		for n := 0; n < want && sc.Scan(); n++ {
			line := sc.Text()
			v, ok := strings.CutPrefix(line, "acked ")
			if !ok {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: writer said %q", round, line)
			}
			acked, _ = strconv.ParseUint(v, 10, 64)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		st, err := Open(dir, Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		last, _ := st.LastIndex()
		if last < acked {
			t.Fatalf("round %d: the log ends at %d, but %d was acknowledged", round, last, acked)
		}
		checkRange(t, st, 1, last)
		st.Close()
		t.Logf("round %d: killed after acknowledging %d; the log holds 1-%d", round, acked, last)
	}
}
