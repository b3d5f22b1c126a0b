package filefence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tenure-io/tenure/fence"
)

// Names the fence keeps in a directory. Guarded writes refuse them.
const (
	// FenceFile holds the highest token accepted per resource, as a JSON
	// object {"resource": token}.
	FenceFile = ".tenure-fence"
	// LockFile is locked (flock) for the whole of every guarded write.
	LockFile = ".tenure-fence.lock"
	// tempPrefix starts the temporary files of writes in progress.
	tempPrefix = ".tenure-tmp-"
)

// ErrNotWritable is returned by Open, and by a guarded write, when the
// directory does not let this process create files in it (permissions, a
// read-only file system, an immutable directory). Nothing was changed.
var ErrNotWritable = errors.New("filefence: directory is not writable")

// Dir is a directory whose files are written only under the fence. It is
// safe for concurrent use, also by several processes (each with its own
// Dir), as long as they all write through a Dir.
type Dir struct {
	path string
}

// Open returns the Dir at path, an existing directory. It creates the
// lock file if it is missing, so a directory this process cannot write is
// refused at once with ErrNotWritable.
func Open(path string) (*Dir, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("filefence: %s is not a directory", path)
	}
	d := &Dir{path: path}
	f, err := os.OpenFile(filepath.Join(path, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, d.wrap("open the lock file", err)
	}
	f.Close()
	return d, nil
}

// Path returns the directory's path.
func (d *Dir) Path() string { return d.path }

// wrap adds context to err, and ErrNotWritable when it is a permission
// or read-only error.
func (d *Dir) wrap(what string, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("%w: %s: %s: %w (nothing was changed)", ErrNotWritable, d.path, what, err)
	}
	return fmt.Errorf("filefence: %s: %s: %w", d.path, what, err)
}

// checkName refuses names that are not a plain file of the directory, or
// that belong to the fence.
func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fence.Invalid("file name %q", name)
	case strings.ContainsRune(name, '/') || strings.ContainsRune(name, filepath.Separator) || strings.ContainsRune(name, 0):
		return fence.Invalid("file name %q is not a name in the directory", name)
	case strings.HasPrefix(name, FenceFile) || strings.HasPrefix(name, tempPrefix):
		return fence.Invalid("file name %q is reserved for the fence", name)
	}
	return nil
}

// WriteFile writes data to the file name in the directory, creating it
// or replacing it, with mode perm exactly (the umask does not apply), if l's token is not lower
// than the directory's fence for l.Name(); otherwise it returns a
// *fence.StaleError and changes nothing. A reader sees the old content or
// the new, never part of it.
func (d *Dir) WriteFile(ctx context.Context, l fence.Lease, name string, data []byte, perm fs.FileMode) error {
	return d.Write(ctx, l, name, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write is WriteFile with the content written by fn, under the lock and
// after the fence check: fn does not run for a stale token. If fn fails,
// nothing is changed and its error is returned.
//
// The steps: lock the directory, check the token, write a temporary file
// and fsync it, record the token (its own temporary file, fsync, rename),
// rename the temporary file over name, fsync the directory, unlock. The
// token is recorded before the data lands, so after a crash the fence is
// never behind the data it protects.
func (d *Dir) Write(ctx context.Context, l fence.Lease, name string, perm fs.FileMode, fn func(w io.Writer) error) error {
	if err := checkName(name); err != nil {
		return err
	}
	return d.guarded(ctx, l, func(record func() error) error { return d.replace(name, perm, fn, record) })
}

// replace writes the new content of name with fn to a temporary file,
// fsyncs it, records the token and renames it over name; under the lock.
func (d *Dir) replace(name string, perm fs.FileMode, fn func(w io.Writer) error, record func() error) error {
	tmp, err := os.CreateTemp(d.path, tempPrefix+"*")
	if err != nil {
		return d.wrap("create a temporary file", err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := fn(tmp); err != nil {
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		return d.wrap("chmod the temporary file", err)
	}
	if err := tmp.Sync(); err != nil {
		return d.wrap("fsync the temporary file", err)
	}
	if err := tmp.Close(); err != nil {
		return d.wrap("close the temporary file", err)
	}
	if err := record(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(d.path, name)); err != nil {
		return d.wrap("rename the new "+name+" into place", err)
	}
	committed = true
	return nil
}

// Update is a fenced read-modify-write of the file name, under one hold
// of the directory's lock: it checks l's token, reads the file (exists
// is false when there is none), calls fn with its content, and writes
// what fn returns as WriteFile does, with mode perm. Nothing can write
// between the read and the write, and a late holder that writes after
// it is refused: the token is recorded with the write. If fn fails,
// nothing changes and its error is returned. Reading with os.ReadFile
// and then calling WriteFile instead loses a late holder's write that
// lands between the two (see docs/fencing.md).
func (d *Dir) Update(ctx context.Context, l fence.Lease, name string, perm fs.FileMode, fn func(old []byte, exists bool) ([]byte, error)) error {
	if err := checkName(name); err != nil {
		return err
	}
	return d.guarded(ctx, l, func(record func() error) error {
		old, err := os.ReadFile(filepath.Join(d.path, name))
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return d.wrap("read "+name, err)
		}
		data, err := fn(old, exists)
		if err != nil {
			return err
		}
		return d.replace(name, perm, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		}, record)
	})
}

// ReadFile reads the file name, fenced: like a write, it refuses a stale
// token (*fence.StaleError) and records l's token, so that no lower token
// writes under l.Name() after it. It is the read of a read-modify-write
// whose write comes later (Update does both under one lock). A missing
// file is an error matching fs.ErrNotExist; the token is recorded all
// the same.
func (d *Dir) ReadFile(ctx context.Context, l fence.Lease, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var data []byte
	var missing error
	err := d.guarded(ctx, l, func(record func() error) error {
		if err := record(); err != nil {
			return err
		}
		var err error
		data, err = os.ReadFile(filepath.Join(d.path, name))
		if errors.Is(err, fs.ErrNotExist) {
			missing = err // the token stays recorded
			return nil
		}
		if err != nil {
			return d.wrap("read "+name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if missing != nil {
		return nil, missing
	}
	return data, nil
}

// Remove removes the file name from the directory if l's token passes the
// fence. A missing file is not an error (the token is still recorded).
func (d *Dir) Remove(ctx context.Context, l fence.Lease, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return d.guarded(ctx, l, func(record func() error) error {
		if err := record(); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(d.path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return d.wrap("remove "+name, err)
		}
		return nil
	})
}

// Advance records token as resource's fence if it is not lower than the
// highest accepted, and returns a *fence.StaleError otherwise.
func (d *Dir) Advance(ctx context.Context, resource string, token uint64) error {
	return d.guarded(ctx, fence.Grant(resource, token), func(record func() error) error { return record() })
}

// Highest returns the highest token accepted for resource, 0 for none.
func (d *Dir) Highest(resource string) (uint64, error) {
	m, err := d.readFence()
	return m[resource], err
}

// guarded validates l, locks the directory, checks l against the fence
// and runs op with a function that records l's token. If op fails after
// recording, the fence is put back as it was. The directory is fsynced
// before the lock is released.
func (d *Dir) guarded(ctx context.Context, l fence.Lease, op func(record func() error) error) error {
	resource, token := l.Name(), l.Token()
	if err := fence.Check(resource, token); err != nil {
		return err
	}
	unlock, err := d.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	old, err := d.readFence()
	if err != nil {
		return err
	}
	if h := old[resource]; token < h {
		return &fence.StaleError{Resource: resource, Token: token, Highest: h}
	}
	recorded := false
	record := func() error {
		if old[resource] == token {
			return nil // already recorded: nothing to write
		}
		m := make(map[string]uint64, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		m[resource] = token
		if err := d.writeFence(m); err != nil {
			return err
		}
		recorded = true
		return nil
	}
	if err := op(record); err != nil {
		if recorded {
			if rerr := d.writeFence(old); rerr != nil {
				return errors.Join(err, fmt.Errorf("filefence: put the fence back: %w", rerr))
			}
		}
		return err
	}
	return d.syncDir()
}

// readFence reads the fence file: an empty fence if there is none.
func (d *Dir) readFence() (map[string]uint64, error) {
	b, err := os.ReadFile(filepath.Join(d.path, FenceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]uint64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filefence: read the fence: %w", err)
	}
	m := map[string]uint64{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("filefence: the fence file %s is damaged: %w", filepath.Join(d.path, FenceFile), err)
	}
	return m, nil
}

// writeFence replaces the fence file with m: a temporary file, fsync,
// rename, fsync of the directory.
func (d *Dir) writeFence(m map[string]uint64) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("filefence: encode the fence: %w", err)
	}
	tmp, err := os.CreateTemp(d.path, tempPrefix+"fence-*")
	if err != nil {
		return d.wrap("create the fence's temporary file", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(d.path, FenceFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return d.wrap("record the token", err)
	}
	return d.syncDir()
}

func (d *Dir) syncDir() error {
	f, err := os.Open(d.path)
	if err != nil {
		return d.wrap("open the directory to fsync it", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return d.wrap("fsync the directory", err)
	}
	return nil
}
