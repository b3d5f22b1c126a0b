package lease

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// snapshotVersion is the format version written by WriteSnapshot. Restore
// accepts this version only; a future format change bumps it and keeps a
// reader for the old one.
const snapshotVersion = 1

type snapshot struct {
	Version   int             `json:"version"`
	Now       time.Duration   `json:"now"`
	LastToken uint64          `json:"last_token"`
	Revision  uint64          `json:"revision"`
	Leases    []Lease         `json:"leases"`
	Queues    []snapshotQueue `json:"queues"`
	KV        []snapshotKey   `json:"kv"`
}

type snapshotQueue struct {
	Name    string   `json:"name"`
	Waiters []waiter `json:"waiters"`
}

type snapshotKey struct {
	Key   string `json:"key"`
	Fence uint64 `json:"fence"`
	Entry *Entry `json:"entry,omitempty"`
}

// WriteSnapshot writes the whole state to w in a versioned format. Output is
// deterministic: equal states give equal bytes.
func (s *State) WriteSnapshot(w io.Writer) error {
	snap := snapshot{Version: snapshotVersion, Now: s.now, LastToken: s.lastToken, Revision: s.revision}
	for _, name := range sortedKeys(s.leases) {
		snap.Leases = append(snap.Leases, *s.leases[name])
	}
	for _, name := range sortedKeys(s.queues) {
		snap.Queues = append(snap.Queues, snapshotQueue{Name: name, Waiters: s.queues[name]})
	}
	for _, key := range sortedKeys(s.kv) {
		f := s.kv[key]
		snap.KV = append(snap.KV, snapshotKey{Key: key, Fence: f.Token, Entry: f.Entry})
	}
	return json.NewEncoder(w).Encode(&snap)
}

// ReadSnapshot reads a state written by WriteSnapshot.
func ReadSnapshot(r io.Reader) (*State, error) {
	var snap snapshot
	if err := json.NewDecoder(r).Decode(&snap); err != nil {
		return nil, fmt.Errorf("lease: read snapshot: %w", err)
	}
	if snap.Version != snapshotVersion {
		return nil, fmt.Errorf("lease: snapshot version %d is not supported (want %d)", snap.Version, snapshotVersion)
	}
	s := New()
	s.now, s.lastToken, s.revision = snap.Now, snap.LastToken, snap.Revision
	for i := range snap.Leases {
		l := snap.Leases[i]
		if l.Token > s.lastToken {
			return nil, fmt.Errorf("lease: snapshot has token %d above its last token %d", l.Token, s.lastToken)
		}
		s.leases[l.Name] = &l
		s.pushExpiry(&l)
	}
	for _, q := range snap.Queues {
		s.queues[q.Name] = q.Waiters
	}
	for _, k := range snap.KV {
		s.kv[k.Key] = &fence{Token: k.Fence, Entry: k.Entry}
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
