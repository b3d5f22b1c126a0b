// Package filefence fences writes to files with tenure's tokens: a file in
// a directory is written or replaced only if the token is not lower than
// the directory's fence for the resource, atomically.
//
// Open a directory and write through it:
//
//	d, err := filefence.Open("/srv/reports")
//	err = d.WriteFile(ctx, lease, "latest.json", body, 0o644)
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop */ }
//
// lease is an *election.Lease, or fence.Grant(name, token) for a plain
// number.
//
// # Read-modify-write
//
// Update reads a file, calls a function with its content and writes what
// it returns, all under one hold of the directory's lock. ReadFile is a
// fenced read: it records the token like a write, so no lower token
// writes after it. Reading with os.ReadFile and then writing with
// WriteFile loses a late holder's write that lands between the two (see
// docs/fencing.md).
//
// # How
//
// Every guarded write, in every process, takes an exclusive flock on the
// directory's LockFile for its whole duration, reads the fence (FenceFile:
// the highest token per resource, JSON), refuses a stale token, writes the
// new content to a temporary file in the same directory and fsyncs it,
// records the token (temporary file, fsync, rename), renames the new
// content over the file and fsyncs the directory. rename(2) replaces a
// file atomically: a reader sees the old content or the new, never part
// of it. The token is recorded before the content is renamed into place,
// so after a crash the fence is never behind the data; if the rename
// fails, the fence is put back.
//
// The fence holds only for writers that go through it: a process that
// writes the files directly bypasses it. Temporary files start with
// ".tenure-tmp-"; a crash can leave one behind, which is harmless.
//
// A directory this process cannot create files in (permissions, a
// read-only or immutable directory) is refused with ErrNotWritable, and
// nothing is changed.
//
// It needs a Unix system (flock), and a local file system: flock over
// NFS is not reliable everywhere.
package filefence
