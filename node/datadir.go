package node

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bbolterr "go.etcd.io/bbolt/errors"

	"github.com/tenure-io/tenure/internal/raftlog"
)

// The pieces of a data directory. A directory is initialised once it has
// a cluster-id file; from then on every piece must be there and not empty.
const (
	fileNodeID    = "node-id"
	fileClusterID = "cluster-id"
	fileRaftDB    = "raft.db"  // raft's term and vote (and the log, before the segment log)
	dirRaftLog    = "raft-log" // the raft log, in segments
	dirSnapshots  = "snapshots"
)

// DataDirError says why a data directory cannot be used. tenured refuses
// to start on it rather than begin a new cluster over old data: a new
// cluster would hand out fencing tokens from 1 again.
type DataDirError struct {
	Dir     string // the data directory
	File    string // the piece at fault, relative to Dir
	Problem string // what is wrong with it
}

func (e *DataDirError) Error() string {
	return fmt.Sprintf("data directory %s: %s %s; refusing to start, so as not to begin a new cluster over old data "+
		"(a new cluster would hand out fencing tokens from 1 again). If this node is one member of a cluster, give it an empty "+
		"--data-dir and join it to its cluster again (--join): it catches up before it votes. Otherwise restore it from a backup "+
		"(tenured --restore FILE), which keeps tokens growing; see docs/operations.md. (tenured --reset-data-dir moves the old data "+
		"aside and starts a NEW cluster, whose tokens start at 1 again.)",
		e.Dir, filepath.Join(e.Dir, e.File), e.Problem)
}

// DataDirAccessError says that the data directory cannot be written: the
// file system is read-only or full, or permissions forbid it. That is not
// damage, and the way out is never to reset the directory: its data is as
// it was, and starting over would hand out fencing tokens from 1 again.
type DataDirAccessError struct {
	Dir  string // the data directory
	File string // what could not be written, relative to Dir ("" for Dir itself)
	Err  error
}

func (e *DataDirAccessError) Error() string {
	return fmt.Sprintf("data directory %s: cannot write %s: %v. The data is not damaged: make the file system writable "+
		"(%s) and start again. Do not reset or delete the data directory",
		e.Dir, filepath.Join(e.Dir, e.File), e.Err, writeAdvice(e.Err))
}

func (e *DataDirAccessError) Unwrap() error { return e.Err }

// cannotWrite reports whether err is the file system refusing a write
// (read-only, permissions, full) rather than a sign of damaged data.
func cannotWrite(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.ENOSPC, syscall.EDQUOT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

func writeAdvice(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "it is mounted read-only"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "it is full: free some space"
	}
	return "check the owner and permissions of the directory and its files"
}

// accessOr returns a *DataDirAccessError for err if it is the file system
// refusing a write, and fallback otherwise.
func (d *dataDir) accessOr(file string, err error, fallback error) error {
	if cannotWrite(err) {
		return &DataDirAccessError{Dir: d.path, File: file, Err: err}
	}
	return fallback
}

// checkWritable writes, syncs and removes a file in the directory, so that
// a directory tenured cannot write is reported as such before anything
// else reads it as damaged.
func (d *dataDir) checkWritable() error {
	probe := filepath.Join(d.path, ".write-check")
	err := writeFileSync(probe, []byte("tenure\n"))
	if err == nil {
		err = os.Remove(probe)
	}
	if err != nil {
		os.Remove(probe)
		return d.accessOr("", err, fmt.Errorf("node: write to data directory %s: %w", d.path, err))
	}
	return nil
}

// dataDir is what a data directory holds of the node's identity.
type dataDir struct {
	path        string
	initialised bool   // it has a cluster-id file
	nodeID      string // "" if not initialised
	clusterID   string // "" if not initialised
	// catchingUp says the node has not caught up since it joined (see
	// catchup.go), and catchUpIndex to where (0: not known yet).
	catchingUp   bool
	catchUpIndex uint64
}

func (d *dataDir) fail(file, problem string) error {
	return &DataDirError{Dir: d.path, File: file, Problem: problem}
}

// openDataDir creates path if needed and checks what it holds. It never
// changes or deletes anything that is there.
func openDataDir(path string) (*dataDir, error) {
	d := &dataDir{path: path}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, d.accessOr("", err, fmt.Errorf("node: create data directory: %w", err))
	}
	if err := d.checkWritable(); err != nil {
		return nil, err
	}
	cid, cidErr := readID(filepath.Join(path, fileClusterID))
	nid, nidErr := readID(filepath.Join(path, fileNodeID))
	switch {
	case errors.Is(cidErr, os.ErrNotExist):
		// Not initialised. A node ID without a cluster ID was left by
		// an older tenure or by damage: either way the directory's
		// history is unknown.
		if !errors.Is(nidErr, os.ErrNotExist) {
			return nil, d.fail(fileClusterID, "is missing, although "+fileNodeID+" is there")
		}
		return d, nil
	case cidErr != nil:
		return nil, d.fail(fileClusterID, cidErr.Error())
	}
	d.initialised, d.clusterID = true, cid
	switch {
	case errors.Is(nidErr, os.ErrNotExist):
		return nil, d.fail(fileNodeID, "is missing")
	case nidErr != nil:
		return nil, d.fail(fileNodeID, nidErr.Error())
	}
	d.nodeID = nid
	var cerr error
	if d.catchingUp, d.catchUpIndex, cerr = readCatchUp(path); cerr != nil {
		return nil, d.fail(fileCatchingUp, cerr.Error())
	}
	switch fi, err := os.Stat(filepath.Join(path, fileRaftDB)); {
	case errors.Is(err, os.ErrNotExist):
		return nil, d.fail(fileRaftDB, "is missing")
	case err != nil:
		return nil, d.fail(fileRaftDB, err.Error())
	case fi.Size() == 0:
		return nil, d.fail(fileRaftDB, "is empty (0 bytes)")
	}
	switch fi, err := os.Stat(filepath.Join(path, dirSnapshots)); {
	case errors.Is(err, os.ErrNotExist):
		return nil, d.fail(dirSnapshots, "is missing")
	case err != nil:
		return nil, d.fail(dirSnapshots, err.Error())
	case !fi.IsDir():
		return nil, d.fail(dirSnapshots, "is not a directory")
	}
	return d, nil
}

// readID reads a one-line ID file; an empty one is an error.
func readID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return "", errors.New("is empty")
	}
	return id, nil
}

// initialise records the node and cluster IDs, making the directory
// initialised. Each file is written whole or not at all, and synced. A
// joining node's directory is marked catching up first (see catchup.go),
// so that it never looks initialised without the mark.
func (d *dataDir) initialise(nodeID, clusterID string, joining bool) error {
	if joining {
		if err := writeCatchUp(d.path, 0); err != nil {
			return d.accessOr(fileCatchingUp, err, fmt.Errorf("node: record %s: %w", fileCatchingUp, err))
		}
		d.catchingUp = true
	}
	for _, f := range []struct{ name, id string }{{fileNodeID, nodeID}, {fileClusterID, clusterID}} {
		if err := writeFileSync(filepath.Join(d.path, f.name), []byte(f.id+"\n")); err != nil {
			return d.accessOr(f.name, err, fmt.Errorf("node: record %s: %w", f.name, err))
		}
	}
	if err := syncDir(d.path); err != nil {
		return d.accessOr("", err, fmt.Errorf("node: sync data directory: %w", err))
	}
	d.initialised, d.nodeID, d.clusterID = true, nodeID, clusterID
	return nil
}

// writeFileSync writes data to a temporary file, syncs it and renames it
// to path.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// NewClusterID returns a random cluster ID.
func NewClusterID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// raftDB is what a read-only look at raft.db, the segment log and the
// snapshot directory finds.
type raftDB struct {
	term        uint64 // raft's current term; 0 if none was ever stored
	first, last uint64 // log index range; 0, 0 if the log is empty
	logFile     string // where the log is: raft-log, or raft.db before a migration
	snapshot    uint64 // index of the newest snapshot; 0 if none
	// marks say how far the segment log reached (see raftlog.LogMarks);
	// zero if none were saved (a directory from before they were).
	marks raftlog.LogMarks
}

func (r raftDB) hasState() bool { return r.term > 0 || r.last > 0 || r.snapshot > 0 }

// inspectRaft reads raft.db (opened read-only, so that a refused start
// changes nothing) and lists the snapshots. A missing raft.db reads as
// empty.
func (d *dataDir) inspectRaft() (raftDB, error) {
	var r raftDB
	path := filepath.Join(d.path, fileRaftDB)
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
		if errors.Is(err, bbolterr.ErrTimeout) {
			return r, fmt.Errorf("node: data directory %s is in use by another process", d.path)
		}
		if err != nil {
			return r, d.fail(fileRaftDB, "cannot be opened: "+err.Error())
		}
		err = db.View(func(tx *bbolt.Tx) error {
			if b := tx.Bucket([]byte("conf")); b != nil {
				if v := b.Get(keyCurrentTerm); len(v) == 8 {
					r.term = binary.BigEndian.Uint64(v)
				}
				m, err := raftlog.ParseMarks(b.Get(keyLogMarks))
				if err != nil {
					return err
				}
				r.marks = m
			}
			if b := tx.Bucket([]byte("logs")); b != nil {
				c := b.Cursor()
				if k, _ := c.First(); len(k) == 8 {
					r.first = binary.BigEndian.Uint64(k)
				}
				if k, _ := c.Last(); len(k) == 8 {
					r.last = binary.BigEndian.Uint64(k)
				}
			}
			return nil
		})
		db.Close()
		if err != nil {
			return r, d.fail(fileRaftDB, "cannot be read: "+err.Error())
		}
	}
	r.logFile = fileRaftDB
	if r.last == 0 {
		// Unless raft.db still holds a log to move, the log is in the
		// segment log.
		r.logFile = dirRaftLog
		var err error
		if r.first, r.last, err = raftlog.Inspect(filepath.Join(d.path, dirRaftLog)); err != nil {
			return r, d.fail(dirRaftLog, "cannot be read: "+err.Error())
		}
	}
	entries, err := os.ReadDir(filepath.Join(d.path, dirSnapshots))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return r, d.fail(dirSnapshots, "cannot be listed: "+err.Error())
	}
	for _, e := range entries {
		// raft names a snapshot term-index-millis; ".tmp" ones are
		// unfinished.
		var term, index, ms uint64
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &index, &ms); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d.path, dirSnapshots, e.Name(), "meta.json")); err != nil {
			continue
		}
		r.snapshot = max(r.snapshot, index)
	}
	return r, nil
}

// checkRaftState checks that the raft state the directory holds fits it:
// state only in an initialised directory, a term wherever there is state,
// and a log that begins at 1 or where a snapshot ends. bootstrap says the
// node would start a new cluster if it had no state: an initialised
// directory never does that.
func (d *dataDir) checkRaftState(bootstrap bool) error {
	r, err := d.inspectRaft()
	if err != nil {
		return err
	}
	if !d.initialised {
		if r.hasState() {
			return d.fail(fileClusterID, "is missing, although "+fileRaftDB+" or "+dirSnapshots+" holds raft state")
		}
		return nil
	}
	switch {
	case !r.hasState() && bootstrap:
		return d.fail(fileRaftDB, "holds no raft state (no term, no log entries, no snapshot), although the directory was initialised")
	case !r.hasState():
		return nil // a joining member that has not received anything yet
	case r.term == 0:
		return d.fail(fileRaftDB, "holds no raft term or vote, although the directory has raft state")
	case r.logFile == dirRaftLog && !isDir(filepath.Join(d.path, dirRaftLog)):
		return d.fail(dirRaftLog, "is missing")
	case r.first > 1 && r.snapshot+1 < r.first:
		return d.fail(dirSnapshots, fmt.Sprintf("holds no snapshot of the entries before index %d, where the log in %s begins", r.first, r.logFile))
	case r.logFile == dirRaftLog && r.marks.Check(r.first, r.last) != nil:
		// The log lost entries it had synced (its files were deleted,
		// or its directory emptied): this node may have acknowledged
		// them, and with them gone it could hand out their tokens
		// again.
		return d.fail(dirRaftLog, fmt.Sprintf("%s (%s records how far it reached)", strings.TrimPrefix(r.marks.Check(r.first, r.last).Error(), "raftlog: the log "), fileRaftDB))
	case r.last == 0 && r.snapshot == 0:
		// A term but no log and no snapshot: the snapshot the log was
		// compacted into is gone. (A member that joined and crashed
		// between its first heartbeat and its first entry looks the
		// same; it held nothing, and is refused all the same.)
		return d.fail(dirSnapshots, "holds no snapshot, and the log in "+r.logFile+" is empty: the state is gone")
	}
	return nil
}

// keyCurrentTerm is where raft keeps its current term in the stable store.
var keyCurrentTerm = []byte("CurrentTerm")

// keyLogMarks is where the segment log's marks are kept in raft.db (see
// raftlog.LogMarks): outside the log's own directory, so that a log whose
// files are gone is told apart from one that never held more.
var keyLogMarks = []byte("TenureLogMarks")

// boltMarks keeps the segment log's marks in raft.db.
type boltMarks struct{ db *raftboltdb.BoltStore }

func (b boltMarks) LoadMarks() (raftlog.LogMarks, error) {
	v, err := b.db.Get(keyLogMarks)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return raftlog.LogMarks{}, nil
	}
	if err != nil {
		return raftlog.LogMarks{}, err
	}
	return raftlog.ParseMarks(v)
}

func (b boltMarks) SaveMarks(m raftlog.LogMarks) error { return b.db.Set(keyLogMarks, m.Bytes()) }

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
