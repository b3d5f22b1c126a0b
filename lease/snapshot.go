package lease

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Snapshot format versions. ReadSnapshot reads every one of them, forever.
//
// Version 1 has at most one lease per name and no limits. Version 2 adds
// semaphores: several leases (slots) per name, in the order granted, and
// a "Limit" on leases and waiters of a semaphore. WriteSnapshot writes
// version 1 while no semaphore is held or waited for, so a state without
// semaphores gives the same bytes as before they existed (and a node that
// predates them can still restore it).
//
// Version 3 adds the principal that acquired a grant or queued a waiter
// ("Principal"). It is written only when some grant or waiter has one, so
// a node that predates it refuses such a snapshot instead of dropping
// the principals.
const (
	snapshotV1 = 1
	snapshotV2 = 2
	snapshotV3 = 3
)

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
	snap := snapshot{Version: snapshotV1, Now: s.now, LastToken: s.lastToken, Revision: s.revision}
	for _, name := range sortedKeys(s.leases) {
		for _, l := range s.leases[name] {
			snap.Leases = append(snap.Leases, *l)
			if l.Limit != 0 {
				snap.Version = max(snap.Version, snapshotV2)
			}
			if l.Principal != "" {
				snap.Version = snapshotV3
			}
		}
	}
	for _, name := range sortedKeys(s.queues) {
		snap.Queues = append(snap.Queues, snapshotQueue{Name: name, Waiters: s.queues[name]})
		for _, w := range s.queues[name] {
			if w.Limit != 0 {
				snap.Version = max(snap.Version, snapshotV2)
			}
			if w.Principal != "" {
				snap.Version = snapshotV3
			}
		}
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
	if snap.Version < snapshotV1 || snap.Version > snapshotV3 {
		return nil, fmt.Errorf("lease: snapshot version %d is not supported (want %d to %d)", snap.Version, snapshotV1, snapshotV3)
	}
	s := New()
	s.now, s.lastToken, s.revision = snap.Now, snap.LastToken, snap.Revision
	for i := range snap.Leases {
		l := &snap.Leases[i]
		if l.Token > s.lastToken {
			return nil, fmt.Errorf("lease: snapshot has token %d above its last token %d", l.Token, s.lastToken)
		}
		if err := checkSlot(snap.Version, s.leases[l.Name], l); err != nil {
			return nil, err
		}
		s.leases[l.Name] = append(s.leases[l.Name], l)
		s.pushExpiry(l)
	}
	for _, q := range snap.Queues {
		s.queues[q.Name] = q.Waiters
	}
	for _, k := range snap.KV {
		s.kv[k.Key] = &fence{Token: k.Fence, Entry: k.Entry}
	}
	return s, nil
}

// checkSlot checks that l may follow the grants ls of the same name in a
// snapshot of version v.
func checkSlot(v int, ls []*Lease, l *Lease) error {
	switch {
	case v == snapshotV1 && l.Limit != 0:
		return fmt.Errorf("lease: version 1 snapshot has a limit on %q", l.Name)
	case v < snapshotV3 && l.Principal != "":
		return fmt.Errorf("lease: version %d snapshot has a principal on %q", v, l.Name)
	case l.Limit < 0 || l.Limit == 1:
		return fmt.Errorf("lease: snapshot has the limit %d on %q", l.Limit, l.Name)
	case len(ls) == 0:
		return nil
	case l.Limit != ls[0].Limit:
		return fmt.Errorf("lease: snapshot has grants of %q with the limits %d and %d", l.Name, ls[0].Limit, l.Limit)
	case len(ls) >= effectiveLimit(l.Limit):
		return fmt.Errorf("lease: snapshot has more than %d grants of %q", effectiveLimit(l.Limit), l.Name)
	case l.Token <= ls[len(ls)-1].Token:
		return fmt.Errorf("lease: snapshot has the grants of %q out of order", l.Name)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
