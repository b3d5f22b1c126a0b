package faultfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// undo is what a cut must do to a file to bring back its last synced
// state: write back the saved old bytes and truncate to size.
type undo struct {
	size  int64   // size at the last sync
	saved []saved // disjoint ranges of [0, size), each saved once
}

type saved struct {
	off  int64
	n    int64
	data []byte // nil: n zero bytes (a preallocated range, kept cheaply)
}

// covered returns the parts of [from, to) that no saved range covers.
func (u *undo) uncovered(from, to int64) [][2]int64 {
	var out [][2]int64
	pos := from
	for _, s := range u.saved { // sorted by off
		end := s.off + s.n
		if end <= pos {
			continue
		}
		if s.off >= to {
			break
		}
		if s.off > pos {
			out = append(out, [2]int64{pos, s.off})
		}
		pos = max(pos, end)
		if pos >= to {
			return out
		}
	}
	if pos < to {
		out = append(out, [2]int64{pos, to})
	}
	return out
}

// undoFor returns the undo record of the open file fd, making one (with
// the file's current size as its synced size) if it has none.
func (f *FS) undoForLocked(id fileID, fd int) (*undo, error) {
	if u := f.files[id]; u != nil {
		return u, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	u := &undo{size: st.Size}
	f.files[id] = u
	return u, nil
}

// saveLocked keeps the bytes fd holds in [from, to) that a change is about
// to overwrite, where no earlier unsynced change saved them already.
func (f *FS) saveLocked(id fileID, fd int, from, to int64) error {
	u, err := f.undoForLocked(id, fd)
	if err != nil {
		return err
	}
	to = min(to, u.size)
	if from >= to {
		return nil
	}
	for _, r := range u.uncovered(from, to) {
		buf := make([]byte, r[1]-r[0])
		n, err := unix.Pread(fd, buf, r[0])
		if err != nil {
			return err
		}
		// Past the current end (after a truncate the cut will undo)
		// the bytes are zeros.
		clear(buf[n:])
		s := saved{off: r[0], n: int64(len(buf)), data: buf}
		if allZero(buf) {
			s.data = nil
		}
		u.saved = append(u.saved, s)
	}
	sort.Slice(u.saved, func(i, j int) bool { return u.saved[i].off < u.saved[j].off })
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// syncFileLocked makes a file's current data and size durable.
func (f *FS) syncFileLocked(id fileID) { delete(f.files, id) }

// syncDirLocked makes the current entries of the directory at path
// durable.
func (f *FS) syncDirLocked(id fileID, path string) error {
	des, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	entries := make(map[string]entry, len(des))
	for _, de := range des {
		cid, mode, err := statID(filepath.Join(path, de.Name()))
		if err != nil {
			return err
		}
		entries[de.Name()] = entry{id: cid, mode: mode}
	}
	f.replaceDirLocked(id, entries)
	return f.purgeLocked()
}

// replaceDirLocked sets the synced entries of directory id (nil: none).
func (f *FS) replaceDirLocked(id fileID, entries map[string]entry) {
	for _, e := range f.dirs[id] {
		if f.refs[e.id]--; f.refs[e.id] <= 0 {
			delete(f.refs, e.id)
		}
	}
	if entries == nil {
		delete(f.dirs, id)
		return
	}
	f.dirs[id] = entries
	for _, e := range entries {
		f.refs[e.id]++
	}
}

// removeLocked is called before path (file or directory id) leaves its
// directory: if synced entries still name it, it is moved to the keep
// area, and the caller must not remove it; else the caller removes it.
func (f *FS) removeLocked(path string, id fileID) (moved bool, err error) {
	if f.refs[id] == 0 {
		return false, nil
	}
	f.keepSeq++
	dst := filepath.Join(f.keep, strconv.Itoa(f.keepSeq))
	if err := os.Rename(path, dst); err != nil {
		return false, err
	}
	return true, nil
}

// forgetLocked drops what is known of a file or directory no synced entry
// names and that is gone.
func (f *FS) forgetLocked(id fileID) {
	delete(f.files, id)
	f.replaceDirLocked(id, nil)
}

// purgeLocked deletes from the keep area what no synced entry names any
// longer.
func (f *FS) purgeLocked() error {
	for {
		des, err := os.ReadDir(f.keep)
		if err != nil {
			return err
		}
		purged := false
		for _, de := range des {
			p := filepath.Join(f.keep, de.Name())
			id, _, err := statID(p)
			if err != nil {
				return err
			}
			if f.refs[id] > 0 {
				continue
			}
			if err := os.Remove(p); err != nil {
				return err
			}
			f.forgetLocked(id)
			purged = true
		}
		if !purged {
			return nil
		}
	}
}

// rollBack brings the backing directory back to its last synced state.
// The file system must be unmounted.
func (f *FS) rollBack() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	where := map[fileID]string{}
	for _, dir := range []string{f.backing, f.keep} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				id, _, err := statID(p)
				if err != nil {
					return err
				}
				where[id] = p
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("faultfs: cut: %w", err)
		}
	}
	// Data first: write the old bytes back to each inode.
	for id, u := range f.files {
		p, ok := where[id]
		if !ok {
			continue // gone, and no synced entry names it
		}
		if err := u.apply(p); err != nil {
			return fmt.Errorf("faultfs: cut: roll back %s: %w", p, err)
		}
		f.stats.FilesRolledBack++
		for _, s := range u.saved {
			f.stats.BytesRolledBack += s.n
		}
	}
	// Then the tree: build the synced one beside the backing directory,
	// linking each file's inode in, and swap them.
	rootID, rootMode, err := statID(f.backing)
	if err != nil {
		return fmt.Errorf("faultfs: cut: %w", err)
	}
	next, old := f.backing+".faultfs-next", f.backing+".faultfs-old"
	for _, p := range []string{next, old} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("faultfs: cut: %w", err)
		}
	}
	if err := os.Mkdir(next, fs.FileMode(rootMode&0o777)); err != nil {
		return fmt.Errorf("faultfs: cut: %w", err)
	}
	if err := f.buildLocked(rootID, next, where); err != nil {
		return fmt.Errorf("faultfs: cut: %w", err)
	}
	// Count the entries that go.
	seen := map[fileID]bool{}
	filepath.WalkDir(next, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			if id, _, err := statID(p); err == nil {
				seen[id] = true
			}
		}
		return nil
	})
	filepath.WalkDir(f.backing, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != f.backing && d.Type().IsRegular() {
			if id, _, err := statID(p); err == nil && !seen[id] {
				f.stats.EntriesDropped++
			}
		}
		return nil
	})
	if err := os.Rename(f.backing, old); err != nil {
		return fmt.Errorf("faultfs: cut: %w", err)
	}
	if err := os.Rename(next, f.backing); err != nil {
		return fmt.Errorf("faultfs: cut: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("faultfs: cut: %w", err)
	}
	return nil
}

// buildLocked fills path with the synced entries of directory id.
func (f *FS) buildLocked(id fileID, path string, where map[fileID]string) error {
	for name, e := range f.dirs[id] {
		p := filepath.Join(path, name)
		switch {
		case e.isDir():
			if err := os.Mkdir(p, fs.FileMode(e.mode&0o777)); err != nil {
				return err
			}
			if err := f.buildLocked(e.id, p, where); err != nil {
				return err
			}
		case e.mode&syscall.S_IFMT == syscall.S_IFREG:
			src, ok := where[e.id]
			if !ok {
				return fmt.Errorf("the inode of %s is gone", p)
			}
			if err := os.Link(src, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// apply writes the saved bytes back to the file at path and truncates it
// to its synced size.
func (u *undo) apply(path string) error {
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer file.Close()
	var zeros []byte
	for _, s := range u.saved {
		data := s.data
		if data == nil {
			if int64(len(zeros)) < s.n {
				zeros = make([]byte, s.n)
			}
			data = zeros[:s.n]
		}
		if _, err := file.WriteAt(data, s.off); err != nil {
			return err
		}
	}
	if err := file.Truncate(u.size); err != nil {
		return err
	}
	return file.Sync()
}
