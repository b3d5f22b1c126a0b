package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// ErrMounted is returned by Mount when the mount point is already the
// mount point of a file system.
var ErrMounted = errors.New("faultfs: mount point in use")

// FS is one mount of the file system.
type FS struct {
	mountpoint string
	backing    string // the directory the mount passes through to
	keep       string // removed files the last synced entries still name

	mu       sync.Mutex
	server   *fuse.Server
	files    map[fileID]*undo
	dirs     map[fileID]map[string]entry // synced entries per directory
	refs     map[fileID]int              // how many synced entries name each file
	keepSeq  int
	capacity int64
	readOnly bool
	stats    Stats
}

// Stats counts what the file system did since it was mounted.
type Stats struct {
	// Cuts is the number of calls to Cut that completed.
	Cuts int
	// FilesRolledBack and BytesRolledBack count the files whose unsynced
	// data a cut undid, and the bytes it wrote back.
	FilesRolledBack int
	BytesRolledBack int64
	// EntriesDropped counts directory entries that existed at a cut but
	// not at their directory's last sync.
	EntriesDropped int
	// ENOSPC and EROFS count the changes the switches refused.
	ENOSPC, EROFS int
}

// fileID names a file on the backing file system: its inode number and
// its birth time, so that a reused inode number is not taken for the
// file that had it before.
type fileID struct {
	Ino   uint64
	Birth int64
}

// entry is one name in a directory's synced entries.
type entry struct {
	id   fileID
	mode uint32 // type and permission bits
}

func (e entry) isDir() bool { return e.mode&syscall.S_IFMT == syscall.S_IFDIR }

// Mount mounts a faultfs at mountpoint that passes through to backing, a
// directory on a file system with hard links and statx birth times
// (ext4, xfs, btrfs, tmpfs). Both directories are created if missing.
// What backing holds at the time of the mount is taken as synced. Hidden
// state lives next to backing, in backing+".faultfs-keep".
func Mount(mountpoint, backing string) (*FS, error) {
	for _, d := range []string{mountpoint, backing} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("faultfs: %w", err)
		}
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	f := &FS{mountpoint: mountpoint, backing: backing, keep: backing + ".faultfs-keep"}
	if err := f.reset(); err != nil {
		return nil, err
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Dir returns the mount point.
func (f *FS) Dir() string { return f.mountpoint }

// Backing returns the directory the mount passes through to.
func (f *FS) Backing() string { return f.backing }

// Stats returns the counts so far.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// SetCapacity limits the bytes the files under the mount may occupy:
// writes past the end of a file, fallocate and creates that would go
// beyond it fail with ENOSPC. Zero or less removes the limit.
func (f *FS) SetCapacity(bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.capacity = max(bytes, 0)
}

// MakeReadOnly makes every change fail with EROFS until MakeWritable.
func (f *FS) MakeReadOnly() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly = true
}

// MakeWritable ends MakeReadOnly.
func (f *FS) MakeWritable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly = false
}

// Usage returns the bytes the files under the mount occupy on the
// backing file system (allocated blocks).
func (f *FS) Usage() int64 {
	var total int64
	filepath.WalkDir(f.backing, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

func (f *FS) mount() error {
	root, err := fs.NewLoopbackRoot(f.backing)
	if err != nil {
		return fmt.Errorf("faultfs: %w", err)
	}
	lb := root.(*fs.LoopbackNode)
	n := &node{LoopbackNode: lb, fsys: f}
	lb.RootData.RootNode = n
	zero := time.Duration(0)
	opts := &fs.Options{
		// Attributes and entries may change under the kernel only at a
		// cut, which remounts; caching them for a second is safe.
		MountOptions: fuse.MountOptions{
			FsName:               "faultfs",
			Name:                 "faultfs",
			DirectMountStrict:    true,
			DisabledCapabilities: fuse.CAP_PASSTHROUGH | fuse.CAP_WRITEBACK_CACHE,
			MaxBackground:        64,
		},
		NegativeTimeout: &zero,
	}
	server, err := fs.Mount(f.mountpoint, n, opts)
	if err != nil {
		return fmt.Errorf("faultfs: mount %s: %w", f.mountpoint, err)
	}
	f.mu.Lock()
	f.server = server
	f.mu.Unlock()
	return nil
}

// unmount unmounts, detaching the mount if a process still uses it (a
// power cut does not wait for anyone), and waits for the server to stop.
func (f *FS) unmount() error {
	f.mu.Lock()
	server := f.server
	f.server = nil
	f.mu.Unlock()
	if server == nil {
		return nil
	}
	var st unix.Stat_t
	statErr := unix.Stat(f.mountpoint, &st)
	if err := server.Unmount(); err != nil {
		if err := unix.Unmount(f.mountpoint, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("faultfs: unmount %s: %w", f.mountpoint, err)
		}
		// The server stops once no file of the mount is open, or at
		// once if the connection can be aborted (fusectl mounted).
		if statErr == nil {
			abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
			os.WriteFile(abort, []byte("1"), 0)
		}
		server.Wait()
	}
	return nil
}

// Unmount unmounts the file system and leaves the backing directory as it
// is: every change, synced or not, stays.
func (f *FS) Unmount() error {
	if err := f.unmount(); err != nil {
		return err
	}
	return os.RemoveAll(f.keep)
}

// Cut is a power cut: it unmounts, drops every change that was not
// synced, and mounts again. Processes must have closed their files on the
// mount (they would have died with the power). If one has not, the mount
// is detached and Cut waits until it does, unless the FUSE connection can
// be aborted through fusectl (/sys/fs/fuse/connections), which ends its
// files (ENOTCONN) at once.
func (f *FS) Cut() error {
	if err := f.unmount(); err != nil {
		return err
	}
	if err := f.rollBack(); err != nil {
		return err
	}
	if err := f.reset(); err != nil {
		return err
	}
	f.mu.Lock()
	f.stats.Cuts++
	f.mu.Unlock()
	return f.mount()
}

// reset takes what backing holds as synced.
func (f *FS) reset() error {
	if err := os.RemoveAll(f.keep); err != nil {
		return fmt.Errorf("faultfs: %w", err)
	}
	if err := os.Mkdir(f.keep, 0o700); err != nil {
		return fmt.Errorf("faultfs: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = map[fileID]*undo{}
	f.dirs = map[fileID]map[string]entry{}
	f.refs = map[fileID]int{}
	return filepath.WalkDir(f.backing, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		id, _, err := statID(p)
		if err != nil {
			return err
		}
		return f.syncDirLocked(id, p)
	})
}

// statID returns the fileID and mode of path (not following a symlink).
func statID(path string) (fileID, uint32, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME|unix.STATX_TYPE|unix.STATX_MODE, &stx); err != nil {
		return fileID{}, 0, err
	}
	return idOf(&stx), uint32(stx.Mode), nil
}

// fdID returns the fileID of an open file.
func fdID(fd int) (fileID, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &stx); err != nil {
		return fileID{}, err
	}
	return idOf(&stx), nil
}

func idOf(stx *unix.Statx_t) fileID {
	id := fileID{Ino: stx.Ino}
	if stx.Mask&unix.STATX_BTIME != 0 {
		id.Birth = stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
	}
	return id
}
