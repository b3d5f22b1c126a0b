package faultfs

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// The bbolt writer runs in a child process (this test binary again), so
// that a cut can follow a SIGKILL as it would a power loss.
const (
	envBoltPath   = "FAULTFS_TEST_BOLT_PATH"
	envBoltNoSync = "FAULTFS_TEST_BOLT_NOSYNC"
	envBoltFrom   = "FAULTFS_TEST_BOLT_FROM"
	envBoltCheck  = "FAULTFS_TEST_BOLT_CHECK"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envBoltCheck); path != "" {
		upTo, _ := strconv.Atoi(os.Getenv(envBoltFrom))
		os.Exit(boltCheck(path, upTo))
	}
	if path := os.Getenv(envBoltPath); path != "" {
		os.Exit(boltWriter(path, os.Getenv(envBoltNoSync) != "", os.Getenv(envBoltFrom)))
	}
	os.Exit(m.Run())
}

var bucket = []byte("b")

// boltWriter commits keys from, from+1, ... to the database at path, one
// transaction each, and prints each key once its commit returned.
func boltWriter(path string, noSync bool, from string) int {
	next, _ := strconv.Atoi(from)
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second, NoSync: noSync})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	// bbolt does not sync the directory it creates its file in.
	if dir, err := os.Open(filepath.Dir(path)); err == nil {
		dir.Sync()
		dir.Close()
	}
	r := rand.New(rand.NewPCG(uint64(next), 1))
	for ; ; next++ {
		// Values of varied sizes make pages split, overflow and free.
		val := make([]byte, 16+r.IntN(6000))
		binary.BigEndian.PutUint64(val, uint64(next))
		err := db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bucket)
			if err != nil {
				return err
			}
			if next%7 == 0 && next > 10 {
				// Delete an older key now and then, to exercise the
				// freelist.
				if err := b.Delete(key(next - 10)); err != nil {
					return err
				}
			}
			return b.Put(key(next), val)
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "update:", err)
			return 1
		}
		fmt.Println(next)
	}
}

func key(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

// boltRound starts the writer, lets it commit n keys, SIGKILLs it, and
// returns the keys it acknowledged.
func boltRound(t *testing.T, path string, noSync bool, from, n int) []int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envBoltPath+"="+path, envBoltFrom+"="+strconv.Itoa(from))
	if noSync {
		cmd.Env = append(cmd.Env, envBoltNoSync+"=1")
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []int
	sc := bufio.NewScanner(out)
	for len(acked) < n && sc.Scan() {
		k, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("writer printed %q", sc.Text())
		}
		acked = append(acked, k)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(acked) < n {
		t.Fatalf("the writer stopped after %d of %d commits: %s", len(acked), n, stderr.String())
	}
	return acked
}

// boltCheck opens the database at path as tenured would, checks its
// consistency and prints the keys up to upTo it lacks. It runs in a child
// process: a page fault on a FUSE mount served by the same Go process can
// deadlock with the garbage collector.
func boltCheck(path string, upTo int) int {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bbolt does not open:", err)
		return 1
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			return fmt.Errorf("consistency check: %w", err)
		}
		b := tx.Bucket(bucket)
		for k := 0; k <= upTo; k++ {
			if k > 0 && (k+10)%7 == 0 {
				continue // deleted by the writer's commit of k+10
			}
			if b == nil || b.Get(key(k)) == nil {
				fmt.Println(k)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// checkBolt runs boltCheck and returns the acknowledged keys (all up to
// upTo) the database lacks.
func checkBolt(t *testing.T, path string, upTo int) (missing []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envBoltCheck+"="+path, envBoltFrom+"="+strconv.Itoa(upTo))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("after the cut: %v: %s", err, stderr.String())
	}
	return strings.Fields(string(out))
}

// TestBoltSurvivesCuts SIGKILLs a bbolt writer at random points, cuts,
// and checks that the database opens, is consistent and holds every
// acknowledged commit.
func TestBoltSurvivesCuts(t *testing.T) {
	f := mount(t)
	path := filepath.Join(f.Dir(), "raft.db")
	const seed = 1
	r := rand.New(rand.NewPCG(seed, 2))
	var acked []int
	next := 0
	for round := range 6 {
		got := boltRound(t, path, false, next, 1+r.IntN(60))
		acked = append(acked, got...)
		next = got[len(got)-1] + 1
		mustCut(t, f)
		if missing := checkBolt(t, path, next-1); len(missing) > 0 {
			t.Fatalf("round %d (seed %d): acknowledged keys lost: %v", round, seed, missing)
		}
	}
	t.Logf("%d commits acknowledged over 6 cuts; %+v", len(acked), f.Stats())
}

// TestBoltNoSyncLosesCommits is the negative control: with bbolt's
// fsyncs off, a cut loses acknowledged commits.
func TestBoltNoSyncLosesCommits(t *testing.T) {
	f := mount(t)
	path := filepath.Join(f.Dir(), "raft.db")
	// Make the file and its first commit durable; the rest never syncs.
	first := boltRound(t, path, false, 0, 1)
	acked := boltRound(t, path, true, first[0]+1, 20)
	mustCut(t, f)
	missing := checkBolt(t, path, acked[len(acked)-1])
	if len(missing) == 0 {
		t.Fatalf("with NoSync every acknowledged commit survived the cut: the file system keeps unsynced writes")
	}
	if st := f.Stats(); st.BytesRolledBack == 0 {
		t.Errorf("stats %+v: nothing rolled back", st)
	}
}
