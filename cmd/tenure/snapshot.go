package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/node"
)

const snapshotUsage = `Usage: tenure snapshot save FILE

Commands of backups:
  snapshot save FILE   write a backup of the cluster's state to FILE

Restore a backup with tenured --restore FILE (see docs/operations.md).
`

func (a *app) snapshot(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "snapshot: no command given", usage: snapshotUsage}
	}
	switch args[0] {
	case "save":
		return a.snapshotSave(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: snapshotUsage}
	}
	return &usageError{msg: fmt.Sprintf("snapshot: unknown command %q", args[0]), usage: snapshotUsage}
}

// snapshotJSON is what snapshot save prints with -o json.
type snapshotJSON struct {
	File      string `json:"file"`
	ClusterID string `json:"cluster_id"`
	Index     uint64 `json:"index"`
	LastToken uint64 `json:"last_token"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Created   string `json:"created"`
}

func (a *app) snapshotSave(ctx context.Context, args []string) error {
	c := a.newCommand("snapshot save", "snapshot save FILE [--timeout 10m]",
		"Writes a backup of the cluster's state to FILE: the leader's state after every\n"+
			"request acknowledged before the command, with a header and a SHA-256 checksum.\n"+
			"FILE is written to a temporary file beside it, synced, verified and then\n"+
			"renamed, so FILE is either the whole backup or unchanged. Needs the admin role.\n"+
			"Prints the raft index, the last token granted and the size.\n\n"+
			"Restore it with tenured --restore FILE --data-dir EMPTY_DIR (docs/operations.md).")
	timeout := c.fs.Duration("timeout", 10*time.Minute, "how long the backup may take")
	pos, err := a.parse(c, args, []string{"FILE"}, 1)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return &usageError{msg: fmt.Sprintf("--timeout must be positive, got %s", *timeout), usage: c.usage}
	}
	path := pos[0]
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return &usageError{msg: fmt.Sprintf("%s is a directory; give the backup file's name", path), usage: c.usage}
	}
	return a.call(ctx, *timeout, func(ctx context.Context, cl *client.Client) error {
		b, err := saveBackup(ctx, cl, path)
		if err != nil {
			return err
		}
		i := b.Info
		a.out().print(snapshotJSON{File: path, ClusterID: i.ClusterID, Index: i.Index, LastToken: i.LastToken,
			Size: b.Size, SHA256: b.Sum, Created: i.Created.Format(time.RFC3339Nano)},
			fmt.Sprintf("saved %s: index %d, last token %d, %d bytes, cluster %s, sha256 %s",
				path, i.Index, i.LastToken, b.Size, i.ClusterID, b.Sum))
		return nil
	})
}

// saveBackup writes the cluster's backup to a temporary file beside
// path, syncs it, verifies its checksum, renames it to path and syncs
// the directory. On any failure path is unchanged and the temporary file
// is gone.
func saveBackup(ctx context.Context, cl *client.Client, path string) (*node.BackupFile, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 256<<10)
	if _, err := cl.Snapshot(ctx, bw); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("snapshot save: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("snapshot save: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	b, err := node.ReadBackup(tmp)
	if err != nil {
		return nil, fmt.Errorf("snapshot save: the backup received does not verify: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("snapshot save: %w", err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return nil, fmt.Errorf("snapshot save: sync %s: %w", dir, err)
		}
	}
	return b, nil
}
