package faultfs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node that records what a cut must undo before each
// change it passes through.
type node struct {
	*fs.LoopbackNode
	fsys *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.FileReader         = (*file)(nil)
	_ fs.FileWriter         = (*file)(nil)
	_ fs.FileFlusher        = (*file)(nil)
	_ fs.FileReleaser       = (*file)(nil)
	_ fs.FileFsyncer        = (*file)(nil)
	_ fs.FileGetattrer      = (*file)(nil)
	_ fs.FileSetattrer      = (*file)(nil)
	_ fs.FileLseeker        = (*file)(nil)
	_ fs.FileAllocater      = (*file)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fsys: n.fsys}
}

// path returns the node's path on the backing file system.
func (n *node) path() string {
	return filepath.Join(n.fsys.backing, n.Path(nil))
}

// refuse returns EROFS when the file system is read-only, and ENOSPC when
// it is full and the change would take grow bytes; it counts what it
// refuses. Call it with the lock held.
func (f *FS) refuseLocked(grow int64) syscall.Errno {
	if f.readOnly {
		f.stats.EROFS++
		return syscall.EROFS
	}
	if f.capacity > 0 && grow > 0 && f.Usage()+grow > f.capacity {
		f.stats.ENOSPC++
		return syscall.ENOSPC
	}
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	writes := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if writes {
		if errno := f.refuseLocked(0); errno != 0 {
			return nil, 0, errno
		}
	}
	// Undo needs to read what a write overwrites.
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	trunc := flags&syscall.O_TRUNC != 0
	flags &^= syscall.O_APPEND | syscall.O_TRUNC | fuse.FMODE_EXEC
	osf, err := os.OpenFile(n.path(), int(flags), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	h, errno := f.newFile(osf)
	if errno != 0 {
		return nil, 0, errno
	}
	if trunc {
		if errno := h.truncateLocked(0); errno != 0 {
			osf.Close()
			return nil, 0, errno
		}
	}
	return h, 0, 0
}

func (f *FS) newFile(osf *os.File) (*file, syscall.Errno) {
	id, err := fdID(int(osf.Fd()))
	if err != nil {
		osf.Close()
		return nil, fs.ToErrno(err)
	}
	return &file{f: osf, fd: int(osf.Fd()), id: id, fsys: f}, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	p := filepath.Join(n.path(), name)
	if errno := f.refuseLocked(1); errno != 0 {
		f.mu.Unlock()
		return nil, nil, 0, errno
	}
	if _, err := os.Lstat(p); err == nil {
		f.mu.Unlock()
		// It exists after all: an open, through Lookup.
		ch, errno := n.Lookup(ctx, name, out)
		if errno != 0 {
			return nil, nil, 0, errno
		}
		if flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
		h, _, errno := ch.Operations().(*node).Open(ctx, flags&^syscall.O_CREAT)
		if errno != 0 {
			return nil, nil, 0, errno
		}
		return ch, h, 0, 0
	}
	defer f.mu.Unlock()
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	flags &^= syscall.O_APPEND | syscall.O_TRUNC
	osf, err := os.OpenFile(p, int(flags)|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o7777))
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	h, errno := f.newFile(osf)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		osf.Close()
		return nil, nil, 0, fs.ToErrno(err)
	}
	out.FromStat(&st)
	ch := n.NewInode(ctx, &fs.LoopbackNode{RootData: n.RootData}, fs.StableAttr{Mode: st.Mode, Ino: st.Ino, Gen: uint64(h.id.Birth)})
	return ch, h, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.refuseLocked(1); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

// remove takes name out of n, moving it to the keep area if the synced
// entries still name it; rm removes it otherwise.
func (n *node) remove(name string, rm func(string) error) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.refuseLocked(0); errno != 0 {
		return errno
	}
	p := filepath.Join(n.path(), name)
	id, mode, err := statID(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		// Only an empty directory goes (as rmdir would check).
		if des, err := os.ReadDir(p); err != nil || len(des) > 0 {
			if err != nil {
				return fs.ToErrno(err)
			}
			return syscall.ENOTEMPTY
		}
	}
	moved, err := f.removeLocked(p, id)
	if err != nil {
		return fs.ToErrno(err)
	}
	if !moved {
		if err := rm(p); err != nil {
			return fs.ToErrno(err)
		}
		f.forgetLocked(id)
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, syscall.Unlink)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, syscall.Rmdir)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := n.fsys
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.refuseLocked(0); errno != 0 {
		return errno
	}
	from, to := filepath.Join(n.path(), name), filepath.Join(np.path(), newName)
	if flags&unix.RENAME_EXCHANGE == 0 {
		srcID, _, err := statID(from)
		if err != nil {
			return fs.ToErrno(err)
		}
		if dstID, dstMode, err := statID(to); err == nil && dstID != srcID {
			if flags&unix.RENAME_NOREPLACE != 0 {
				return syscall.EEXIST
			}
			if dstMode&syscall.S_IFMT == syscall.S_IFDIR {
				if des, err := os.ReadDir(to); err != nil || len(des) > 0 {
					return syscall.ENOTEMPTY
				}
			}
			// The entry renamed over leaves its directory.
			if _, err := f.removeLocked(to, dstID); err != nil {
				return fs.ToErrno(err)
			}
			if f.refs[dstID] == 0 {
				defer f.forgetLocked(dstID)
			}
		}
	}
	return fs.ToErrno(unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, uint(flags)))
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := n.fsys
	if h, ok := fh.(*file); ok {
		return h.Setattr(ctx, in, out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.refuseLocked(0); errno != 0 {
		return errno
	}
	if sz, ok := in.GetSize(); ok {
		// A truncate by path: open the file to save what it drops.
		osf, err := os.OpenFile(n.path(), os.O_RDWR, 0)
		if err != nil {
			return fs.ToErrno(err)
		}
		h, errno := f.newFile(osf)
		if errno != 0 {
			return errno
		}
		errno = h.truncateLocked(int64(sz))
		osf.Close()
		if errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	return n.LoopbackNode.Setattr(ctx, nil, in, out)
}

// Fsync makes a file's data or a directory's entries durable.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.fsys
	if h, ok := fh.(*file); ok {
		return h.Fsync(ctx, flags)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := n.path()
	id, mode, err := statID(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return fs.ToErrno(f.syncDirLocked(id, p))
	}
	f.syncFileLocked(id)
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.path())
	if errno != 0 {
		return nil, 0, errno
	}
	// The handle has no Fsyncdir, so that fsync of a directory comes to
	// Fsync above.
	return &dirHandle{ds: ds}, 0, 0
}

func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS // callers fall back to read and write
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

// dirHandle is an open directory.
type dirHandle struct{ ds fs.DirStream }

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

// file is an open file.
type file struct {
	f    *os.File
	fd   int
	id   fileID
	fsys *FS
}

func (h *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := unix.Pread(h.fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *file) size() (int64, int64, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return 0, 0, fs.ToErrno(err)
	}
	return st.Size, st.Blocks * 512, 0
}

func (h *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f := h.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	size, _, errno := h.size()
	if errno != 0 {
		return 0, errno
	}
	if errno := f.refuseLocked(off + int64(len(data)) - size); errno != 0 {
		return 0, errno
	}
	if err := f.saveLocked(h.id, h.fd, off, off+int64(len(data))); err != nil {
		return 0, fs.ToErrno(err)
	}
	n, err := unix.Pwrite(h.fd, data, off)
	return uint32(n), fs.ToErrno(err)
}

// truncateLocked truncates the file to size, saving what it drops.
func (h *file) truncateLocked(size int64) syscall.Errno {
	cur, _, errno := h.size()
	if errno != 0 {
		return errno
	}
	if errno := h.fsys.refuseLocked(size - cur); errno != 0 {
		return errno
	}
	if err := h.fsys.saveLocked(h.id, h.fd, size, cur); err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(unix.Ftruncate(h.fd, size))
}

func (h *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := h.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.refuseLocked(0); errno != 0 {
		return errno
	}
	if sz, ok := in.GetSize(); ok {
		if errno := h.truncateLocked(int64(sz)); errno != 0 {
			return errno
		}
	}
	if m, ok := in.GetMode(); ok {
		if err := unix.Fchmod(h.fd, m); err != nil {
			return fs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(h.fd), ts, 0); err != nil {
			return fs.ToErrno(err)
		}
	}
	return h.getattr(out)
}

func (h *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f := h.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, allocated, errno := h.size()
	if errno != 0 {
		return errno
	}
	end := int64(off + size)
	switch {
	case mode&^unix.FALLOC_FL_KEEP_SIZE == 0:
		if errno := f.refuseLocked(end - allocated); errno != 0 {
			return errno
		}
	case mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 &&
		mode&^(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE) == 0:
		if errno := f.refuseLocked(0); errno != 0 {
			return errno
		}
		if err := f.saveLocked(h.id, h.fd, int64(off), min(end, cur)); err != nil {
			return fs.ToErrno(err)
		}
	default:
		return syscall.EOPNOTSUPP // collapse and insert ranges move data
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 && end > cur {
		// The size grows: make sure the cut shrinks it back.
		if _, err := f.undoForLocked(h.id, h.fd); err != nil {
			return fs.ToErrno(err)
		}
	}
	return fs.ToErrno(unix.Fallocate(h.fd, mode, int64(off), int64(size)))
}

func (h *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f := h.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncFileLocked(h.id)
	return 0
}

func (h *file) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *file) Release(ctx context.Context) syscall.Errno {
	return fs.ToErrno(h.f.Close())
}

func (h *file) getattr(out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.getattr(out)
}

func (h *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), fs.ToErrno(err)
}
