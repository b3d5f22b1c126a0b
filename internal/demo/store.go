package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tenure-io/tenure/client"
)

// store is where the workers write: tenure's fenced key-value store, or a
// store that takes any write (a lock with a timeout only).
type store interface {
	// Put writes value under key on behalf of the grant (leaseName, token).
	Put(ctx context.Context, key, value, leaseName string, token uint64) error
	// Get returns the value of key and the token that wrote it (0 when
	// the store does not record tokens).
	Get(ctx context.Context, key string) (value string, token uint64, err error)
	// Fenced reports whether Put checks the token.
	Fenced() bool
}

// describedStore is a store that words its writes on the timeline
// itself.
type describedStore interface {
	store
	// describe is the event text of writing value under key.
	describe(key, value string) string
	// rejected is the outcome of a write refused as stale.
	rejected() string
}

var (
	_ describedStore = (*pgDemo)(nil)
	_ store          = fencedStore{}
	_ store          = (*memStore)(nil)
	_ store          = dirStore("")
)

// Store specs, as a worker is given them (the --store flag of a worker).
const (
	// storeKV is tenure's fenced key-value store.
	storeKV = "kv"
	// storeMemory is a map in the demo's process that ignores tokens
	// (in-process workers only).
	storeMemory = "memory"
	// storeDirPrefix, followed by a directory, is one file per key in that
	// directory, written without any check (real-process workers).
	storeDirPrefix = "dir:"
)

// fencedStore is tenure's key-value store: a write is accepted only while
// its token is the current, unexpired grant of the lease and no newer
// token wrote the key.
type fencedStore struct{ c *client.Client }

func (s fencedStore) Put(ctx context.Context, key, value, leaseName string, token uint64) error {
	_, err := s.c.Put(ctx, key, []byte(value), leaseName, token)
	return err
}

func (s fencedStore) Get(ctx context.Context, key string) (string, uint64, error) {
	kv, err := s.c.KVGet(ctx, key)
	if err != nil {
		return "", 0, err
	}
	return string(kv.Value), kv.Token, nil
}

func (fencedStore) Fenced() bool { return true }

// memStore is a timeout-only lock's store in memory: a map under a mutex
// that takes every write and never looks at the token.
type memStore struct {
	mu sync.Mutex
	m  map[string]string
}

func newMemStore() *memStore { return &memStore{m: make(map[string]string)} }

func (s *memStore) Put(ctx context.Context, key, value, leaseName string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = value // no token check: that is the point
	return nil
}

func (s *memStore) Get(ctx context.Context, key string) (string, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return "", 0, fmt.Errorf("demo: key %q has no value: %w", key, client.ErrNotFound)
	}
	return v, 0, nil
}

func (*memStore) Fenced() bool { return false }

// dirStore is a timeout-only lock's store that processes share: one file
// per key in a directory, replaced by every write, token ignored.
type dirStore string

func (d dirStore) path(key string) string {
	return filepath.Join(string(d), strings.ReplaceAll(key, "/", "_"))
}

func (d dirStore) Put(ctx context.Context, key, value, leaseName string, token uint64) error {
	// Write and rename, so a reader never sees half a value. No token
	// check: that is the point.
	tmp, err := os.CreateTemp(string(d), ".put-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(value); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), d.path(key))
}

func (d dirStore) Get(ctx context.Context, key string) (string, uint64, error) {
	b, err := os.ReadFile(d.path(key))
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, fmt.Errorf("demo: key %q has no value: %w", key, client.ErrNotFound)
	}
	return string(b), 0, err
}

func (dirStore) Fenced() bool { return false }

// openStore returns the store named by spec. mem is the store that
// storeMemory names (nil outside the demo's own process).
func openStore(spec string, c *client.Client, mem *memStore) (store, error) {
	switch {
	case spec == storeKV:
		return fencedStore{c}, nil
	case spec == storeMemory && mem != nil:
		return mem, nil
	case strings.HasPrefix(spec, storeDirPrefix) && len(spec) > len(storeDirPrefix):
		dir := strings.TrimPrefix(spec, storeDirPrefix)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("demo: store directory %q does not exist", dir)
		}
		return dirStore(dir), nil
	}
	return nil, fmt.Errorf("demo: unknown store %q (want %s or %sDIR)", spec, storeKV, storeDirPrefix)
}
