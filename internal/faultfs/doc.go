// Package faultfs is a FUSE file system that models a disk with a volatile
// write cache, for fault tests: a power cut loses every change that was
// not synced, as Jepsen's LazyFS does.
//
// A mount passes every operation through to a backing directory, so every
// change is visible at once. What survives a cut follows strict POSIX:
//
//   - a file's data and size, once fsync or fdatasync of that file
//     returned;
//   - a directory's entries (create, rename, unlink, mkdir, rmdir), once
//     fsync of that directory returned. A file that was created and
//     fsynced in a directory that was not is gone after a cut.
//
// To undo what was not synced, the file system keeps, per file, the bytes
// each range held before its first unsynced change, and the size it had
// at its last sync; and, per directory, the entries it had at its last
// sync. A file removed from a directory whose last synced entries still
// name it is moved to a hidden area next to the backing directory (never
// inside it) instead of deleted. Cut unmounts, writes the old bytes back,
// rebuilds the tree from the synced entries (hard links keep each file's
// inode), and mounts again: nothing is served from the kernel's page cache
// of before the cut. The mount runs without a writeback cache, so the
// backing directory always holds what the kernel was told.
//
// Two switches serve other faults: a capacity limit, beyond which writes,
// fallocate and creates fail with ENOSPC, and read-only, under which every
// change fails with EROFS.
//
// Hard links, symbolic links, device nodes and copy_file_range are not
// supported (EPERM or ENOSYS): tenured uses none of them.
package faultfs
