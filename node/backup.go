package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
)

// A backup file is the state of the cluster at one raft index, as the
// leader applied it:
//
//	a header line: BackupInfo as JSON, then "\n"
//	the node's snapshot, exactly as raft's snapshots hold it (fsmSnapshot:
//	  its own header line with the members and cluster ID, then the lease
//	  state's snapshot)
//	a trailer line: "sha256 " and 64 hex digits, then "\n": the SHA-256 of
//	  every byte before the trailer
//
// The trailer has a fixed length, so a reader checks the sum in one pass
// before it trusts a byte of the rest.
const (
	backupFormat  = "tenure-backup"
	backupVersion = 1
	sumPrefix     = "sha256 "
	trailerLen    = len(sumPrefix) + 2*sha256.Size + 1
)

var (
	// ErrBackupCorrupt is returned by ReadBackup and Restore for a file
	// that is not a whole, unchanged backup: a wrong checksum, a
	// truncated file, a header that does not parse.
	ErrBackupCorrupt = errors.New("node: backup file is corrupt")
)

// BackupInfo is the header of a backup file.
type BackupInfo struct {
	// Format is always "tenure-backup"; Version the file format's
	// version (1).
	Format  string `json:"format"`
	Version int    `json:"version"`
	// ClusterID is the ID of the cluster it was taken from.
	ClusterID string `json:"cluster_id"`
	// NodeID is the leader that took it.
	NodeID string `json:"node_id"`
	// Index is the raft index of the last entry the state holds.
	Index uint64 `json:"index"`
	// LastToken is the highest token granted up to Index.
	LastToken uint64 `json:"last_token"`
	// Created is the leader's wall clock when it took the backup. A
	// restore refuses a clock-based token floor on a machine whose clock
	// reads earlier than this.
	Created time.Time `json:"created"`
}

// Backup writes a backup of the cluster's state to w: the state after
// every entry committed before the call was applied (a raft barrier),
// with a header and a checksum (see BackupInfo). Only the leader takes
// backups (ErrNotLeader elsewhere). The state is captured at once;
// writing it does not hold up applying.
func (n *Node) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	if !n.IsLeader() {
		return BackupInfo{}, ErrNotLeader
	}
	if err := n.wait(n.raft.Barrier(n.timeout(ctx))); err != nil {
		return BackupInfo{}, fmt.Errorf("node: backup: %w", mapRaftError(err))
	}
	if err := ctx.Err(); err != nil {
		return BackupInfo{}, err
	}
	f := n.fsm
	f.mu.RLock()
	snap, err := f.snapshotLocked()
	info := BackupInfo{
		Format: backupFormat, Version: backupVersion,
		ClusterID: f.clusterID, NodeID: n.cfg.ID, Index: f.applied, LastToken: f.st.LastToken(),
		Created: time.Now().UTC(),
	}
	f.mu.RUnlock()
	if err != nil {
		return BackupInfo{}, fmt.Errorf("node: backup: %w", err)
	}
	if info.ClusterID == "" {
		info.ClusterID = n.ClusterID()
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	h := sha256.New()
	mw := io.MultiWriter(bw, h)
	head, _ := json.Marshal(info)
	if _, err := mw.Write(append(head, '\n')); err != nil {
		return BackupInfo{}, err
	}
	if _, err := mw.Write(snap.header); err != nil {
		return BackupInfo{}, err
	}
	if err := snap.state.Write(mw); err != nil {
		return BackupInfo{}, err
	}
	if _, err := fmt.Fprintf(bw, "%s%x\n", sumPrefix, h.Sum(nil)); err != nil {
		return BackupInfo{}, err
	}
	return info, bw.Flush()
}

// snapshotLocked captures the state as Snapshot does, for a caller that
// holds f.mu already.
func (f *fsm) snapshotLocked() (*fsmSnapshot, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(snapshotHeader{Version: 1, Members: f.members, ClusterID: f.clusterID}); err != nil {
		return nil, err
	}
	return &fsmSnapshot{header: buf.Bytes(), state: f.st.Capture()}, nil
}

// BackupFile is a backup file whose checksum was verified.
type BackupFile struct {
	Info BackupInfo
	// Size is the file's size in bytes; Sum its SHA-256 (the one its
	// trailer holds).
	Size int64
	Sum  string
	path string
	// body is where the node's snapshot begins and ends in the file.
	bodyStart, bodyEnd int64
}

// ReadBackup opens the backup file at path, verifies its checksum and
// reads its header. Any damage is an error wrapping ErrBackupCorrupt.
func ReadBackup(path string) (*BackupFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("node: open backup: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("node: open backup: %w", err)
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBackupCorrupt, path, fmt.Sprintf(format, args...))
	}
	size := fi.Size()
	if size < int64(trailerLen) {
		return nil, corrupt("%d bytes is too short for a backup (it ends with a %d-byte checksum line)", size, trailerLen)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size-int64(trailerLen))); err != nil {
		return nil, fmt.Errorf("node: read backup: %w", err)
	}
	trailer := make([]byte, trailerLen)
	if _, err := f.ReadAt(trailer, size-int64(trailerLen)); err != nil {
		return nil, fmt.Errorf("node: read backup: %w", err)
	}
	want, ok := parseTrailer(trailer)
	if !ok {
		return nil, corrupt("its last line is not a checksum line (%q followed by 64 hex digits): the file is truncated or not a backup", sumPrefix)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return nil, corrupt("its SHA-256 is %s, but the file says %s: it was changed or damaged after it was written", got, want)
	}
	br := bufio.NewReader(io.NewSectionReader(f, 0, size-int64(trailerLen)))
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, corrupt("no header line")
	}
	var info BackupInfo
	if err := json.Unmarshal(line, &info); err != nil {
		return nil, corrupt("header: %v", err)
	}
	if info.Format != backupFormat {
		return nil, corrupt("header names the format %q, not %q", info.Format, backupFormat)
	}
	if info.Version != backupVersion {
		return nil, fmt.Errorf("node: backup %s has format version %d; this tenured reads version %d", path, info.Version, backupVersion)
	}
	return &BackupFile{Info: info, Size: size, Sum: want, path: path,
		bodyStart: int64(len(line)), bodyEnd: size - int64(trailerLen)}, nil
}

func parseTrailer(b []byte) (string, bool) {
	if !bytes.HasPrefix(b, []byte(sumPrefix)) || b[len(b)-1] != '\n' {
		return "", false
	}
	sum := string(b[len(sumPrefix) : len(b)-1])
	if _, err := hex.DecodeString(sum); err != nil {
		return "", false
	}
	return sum, true
}

// restoreInto reads the backup's state into f, checking the checksum
// again as it reads (the file may have changed since ReadBackup).
func (b *BackupFile) restoreInto(f *fsm) error {
	file, err := os.Open(b.path)
	if err != nil {
		return fmt.Errorf("node: open backup: %w", err)
	}
	defer file.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(file, 0, b.bodyStart)); err != nil {
		return err
	}
	body := &hashingReader{r: io.NewSectionReader(file, b.bodyStart, b.bodyEnd-b.bodyStart), h: h}
	if err := f.Restore(io.NopCloser(body)); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBackupCorrupt, b.path, err)
	}
	// Restore stops reading at the end of the lease snapshot's JSON;
	// hash the rest too.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != b.Sum {
		return fmt.Errorf("%w: %s changed while it was read", ErrBackupCorrupt, b.path)
	}
	return nil
}

type hashingReader struct {
	r io.Reader
	h hash.Hash
}

func (r *hashingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	return n, err
}
