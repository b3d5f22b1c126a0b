package verify

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The member and damaged-dir faults change a node's data directory by its
// contents, never by removing or renaming the directory itself: with
// power-loss faults the directory is the mount point of a faultfs, which
// can be neither. What they write to it they also sync, file by file and
// directory by directory, as an operator's tools would: the faultfs keeps
// only what was synced, so an unsynced wipe or restore would be undone by
// the next power cut of that node, bringing back files tenured never
// wrote (and the run would report what the harness did to the disk as a
// violation).

// wipeDir removes everything in dir but dir itself, and makes the removal
// durable: each directory is synced once emptied, and dir after its
// entries are gone. A dir that does not exist is left so.
func wipeDir(dir string) error {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if de.IsDir() {
			if err := wipeDir(p); err != nil {
				return err
			}
		}
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	if len(des) == 0 {
		return nil
	}
	return syncPath(dir)
}

// restoreDir makes dir hold what from holds: it wipes dir (creating it if
// need be) and copies from's regular files and directories into it, each
// file synced once written and each directory once its entries are in
// place.
func restoreDir(from, dir string) error {
	if err := wipeDir(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return copyDirSync(from, dir)
}

// copyDirSync copies the regular files and directories under from into
// to, which exists, syncing every file it writes and then every directory
// it wrote entries to, the deepest first.
func copyDirSync(from, to string) error {
	var dirs []string
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			if rel != "." {
				info, err := d.Info()
				if err != nil {
					return err
				}
				if err := os.Mkdir(dst, info.Mode().Perm()); err != nil {
					return err
				}
			}
			dirs = append(dirs, dst)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFileSync(p, dst)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncPath(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// copyFileSync copies the regular file from to the new file to, with
// from's permissions, and syncs it.
func copyFileSync(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	// Plain reads and writes: faultfs has no copy_file_range.
	_, err = io.Copy(struct{ io.Writer }{out}, struct{ io.Reader }{in})
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncPath fsyncs the file or directory at path.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
