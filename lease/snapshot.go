package lease

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
	"unique"
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
//
// Version 4 adds client sessions ("sessions", after "kv": see session.go)
// and the session and seq of a waiter. It is written only when a session
// is live or a waiter has one.
//
// Version 5 adds lock-delays and revocations (see lockdelay.go): the
// "LockDelay" of grants and waiters, the lock-delays of names ("delays",
// after "kv" and the sessions) and the tombstones of revoked grants
// ("revoked", last), and in session results the grants a revocation
// ended ("leases"), revoked errors and held errors of a lock-delay. It is
// written only when any of them is there.
//
// Version 6 adds the lease history (see history.go): the retention
// ("history_retention", when an OpHistoryConfig set one) and the kept terms
// of each name ("history", sorted by name, terms in grant order), both
// last. It is written only when either is there.
//
// Version 7 adds shared grants (see shared.go): "Shared" on grants,
// waiters, terms and the grants of remembered results. It is written only
// when one of them is shared, so a node that predates shared grants
// refuses the snapshot instead of taking the readers for writers.
//
// Version 8 adds priorities and handoffs (see handoff.go): the
// "Priority" of grants and waiters (also of the grants in session
// results) and the "handoff_requested" of remembered renewals. It is
// written only when any of them is there (shared grants or not).
//
// Version 9 adds renewal headroom (see memory.go): the "Promised" of
// grants, also of the grants in session results. It is written only when
// a grant has headroom, so a node that predates it refuses the snapshot
// instead of promising the headroom too.
const (
	snapshotV1 = 1
	snapshotV2 = 2
	snapshotV3 = 3
	snapshotV4 = 4
	snapshotV5 = 5
	snapshotV6 = 6
	snapshotV7 = 7
	snapshotV8 = 8
	snapshotV9 = 9
)

type snapshot struct {
	Version   int             `json:"version"`
	Now       time.Duration   `json:"now"`
	LastToken uint64          `json:"last_token"`
	Revision  uint64          `json:"revision"`
	Leases    []Lease         `json:"leases"`
	Queues    []snapshotQueue `json:"queues"`
	KV        []snapshotKey   `json:"kv"`
	// Sessions are written by hand after KV, only in versions 4 and 5.
	Sessions []snapshotSession `json:"sessions,omitempty"`
	// Delays and Revoked follow, only in version 5.
	Delays  []snapshotDelay     `json:"delays,omitempty"`
	Revoked []snapshotTombstone `json:"revoked,omitempty"`
	// HistoryRetention and History follow, only in version 6.
	HistoryRetention *snapshotRetention `json:"history_retention,omitempty"`
	History          []snapshotHistory  `json:"history,omitempty"`
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
// deterministic: equal states give equal bytes. It is Capture().Write(w).
func (s *State) WriteSnapshot(w io.Writer) error {
	return s.Capture().Write(w)
}

// Capture is a copy of a State at one moment, taken cheaply (it shares
// the grants and values, which the State never changes once stored) and
// written later, while the State moves on. A raft snapshot captures in
// the state machine's goroutine and writes in another, so applying does
// not wait for the encoding, and the encoding never holds the whole
// snapshot in memory.
type Capture struct {
	now       time.Duration
	lastToken uint64
	revision  uint64
	leases    []*Lease
	queues    []snapshotQueue
	kv        []snapshotKey
	sessions  []snapshotSession
	delays    []snapshotDelay
	revoked   []snapshotTombstone
	retention *snapshotRetention
	history   []snapshotHistory
}

// Capture returns a copy of s as it is now. It costs a pointer per grant
// and a copy of the waiters and of the key index; sorting and encoding
// are left to Write.
func (s *State) Capture() *Capture {
	c := &Capture{now: s.now, lastToken: s.lastToken, revision: s.revision}
	n := 0
	for _, ls := range s.leases.all() {
		n += len(ls)
	}
	c.leases = make([]*Lease, 0, n)
	for _, ls := range s.leases.all() {
		c.leases = append(c.leases, ls...)
	}
	c.queues = make([]snapshotQueue, 0, len(s.queues))
	for name, q := range s.queues {
		c.queues = append(c.queues, snapshotQueue{Name: name, Waiters: slices.Clone(q)})
	}
	c.kv = make([]snapshotKey, 0, len(s.kv))
	for key, f := range s.kv {
		c.kv = append(c.kv, snapshotKey{Key: key, Fence: f.Token, Entry: f.Entry})
	}
	c.sessions = s.captureSessions(s.now)
	c.delays = s.captureDelays()
	c.revoked = s.captureTombstones(s.now)
	if r := s.history.retention; r != (HistoryRetention{}) {
		c.retention = &snapshotRetention{Terms: r.Terms, Age: r.Age}
	}
	c.history = s.captureHistory(s.now)
	return c
}

// Grants returns how many grants c holds.
func (c *Capture) Grants() int { return len(c.leases) }

// Write writes the captured state to w, one element at a time: the same
// bytes as encoding/json's encoder gives for the whole snapshot at once,
// sorted by name (grants of a semaphore by token) and key, version 1
// unless a semaphore is held or waited for (2), a grant or waiter has a
// principal (3), a session is live (4) or a lock-delay or revocation is
// kept (5).
func (c *Capture) Write(w io.Writer) error {
	slices.SortFunc(c.leases, func(a, b *Lease) int {
		if n := strings.Compare(a.Name, b.Name); n != 0 {
			return n
		}
		return cmp.Compare(a.Token, b.Token)
	})
	slices.SortFunc(c.queues, func(a, b snapshotQueue) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(c.kv, func(a, b snapshotKey) int { return strings.Compare(a.Key, b.Key) })
	version := snapshotV1
	for _, l := range c.leases {
		if l.Limit != 0 {
			version = max(version, snapshotV2)
		}
		if l.Principal != "" {
			version = max(version, snapshotV3)
		}
		if l.LockDelay != 0 {
			version = snapshotV5
		}
	}
	for _, q := range c.queues {
		for _, wt := range q.Waiters {
			if wt.Limit != 0 {
				version = max(version, snapshotV2)
			}
			if wt.Principal != "" {
				version = max(version, snapshotV3)
			}
			if wt.Session != "" {
				version = max(version, snapshotV4)
			}
			if wt.LockDelay != 0 {
				version = snapshotV5
			}
		}
	}
	if len(c.sessions) > 0 {
		version = max(version, snapshotV4)
	}
	for _, ss := range c.sessions {
		if ss.v5() {
			version = snapshotV5
		}
	}
	if len(c.delays) > 0 || len(c.revoked) > 0 {
		version = snapshotV5
	}
	slices.SortFunc(c.history, func(a, b snapshotHistory) int { return strings.Compare(a.Name, b.Name) })
	if c.retention != nil || len(c.history) > 0 {
		version = snapshotV6
	}
	if c.hasShared() {
		version = snapshotV7 // shared.go
	}
	if c.usesPriority() {
		version = snapshotV8 // handoff.go
	}
	if c.usesHeadroom() {
		version = snapshotV9 // memory.go
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	ew := &errWriter{w: bw}
	head, err := json.Marshal(snapshot{Version: version, Now: c.now, LastToken: c.lastToken, Revision: c.revision})
	if err != nil {
		return err
	}
	// head ends with "leases":null,"queues":null,"kv":null}: write it up
	// to the first of them, then the three arrays.
	cut := bytes.Index(head, []byte(`"leases":`))
	ew.write(head[:cut])
	writeArray(ew, "leases", c.leases, false)
	writeArray(ew, "queues", c.queues, false)
	// The arrays after kv are left out when empty (omitempty).
	hist := len(c.history)
	if c.retention != nil {
		hist++
	}
	writeArray(ew, "kv", c.kv, len(c.sessions)+len(c.delays)+len(c.revoked)+hist == 0)
	if len(c.sessions) > 0 {
		writeArray(ew, "sessions", c.sessions, len(c.delays)+len(c.revoked)+hist == 0)
	}
	if len(c.delays) > 0 {
		writeArray(ew, "delays", c.delays, len(c.revoked)+hist == 0)
	}
	if len(c.revoked) > 0 {
		writeArray(ew, "revoked", c.revoked, hist == 0)
	}
	if c.retention != nil {
		b, err := json.Marshal(c.retention)
		if err != nil {
			return err
		}
		ew.write([]byte(`"history_retention":`))
		ew.write(b)
		if len(c.history) > 0 {
			ew.write([]byte(","))
		}
	}
	if len(c.history) > 0 {
		writeArray(ew, "history", c.history, true)
	}
	ew.write([]byte("}\n"))
	if ew.err != nil {
		return ew.err
	}
	return bw.Flush()
}

// writeArray writes "name":[...] (or null for no elements, as
// encoding/json writes a nil slice), and a comma unless last.
func writeArray[E any](ew *errWriter, name string, elems []E, last bool) {
	ew.write([]byte(`"` + name + `":`))
	if len(elems) == 0 {
		ew.write([]byte("null"))
	} else {
		ew.write([]byte("["))
		for i, e := range elems {
			if i > 0 {
				ew.write([]byte(","))
			}
			b, err := json.Marshal(e)
			if err != nil {
				ew.err = cmp.Or(ew.err, err)
				return
			}
			ew.write(b)
		}
		ew.write([]byte("]"))
	}
	if !last {
		ew.write([]byte(","))
	}
}

// errWriter writes until the first error and keeps it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// ReadSnapshot reads a state written by WriteSnapshot.
func ReadSnapshot(r io.Reader) (*State, error) {
	var snap snapshot
	if err := json.NewDecoder(r).Decode(&snap); err != nil {
		return nil, fmt.Errorf("lease: read snapshot: %w", err)
	}
	if snap.Version < snapshotV1 || snap.Version > snapshotV9 {
		return nil, fmt.Errorf("lease: snapshot version %d is not supported (want %d to %d)", snap.Version, snapshotV1, snapshotV9)
	}
	// What a version does not have must not be there: a node of that
	// version would have dropped it.
	c := &Capture{queues: snap.Queues, sessions: snap.Sessions, history: snap.History}
	for i := range snap.Leases {
		c.leases = append(c.leases, &snap.Leases[i])
	}
	if snap.Version < snapshotV7 && c.hasShared() {
		return nil, fmt.Errorf("lease: version %d snapshot has a shared grant or waiter", snap.Version)
	}
	if snap.Version < snapshotV8 && c.usesPriority() {
		return nil, fmt.Errorf("lease: version %d snapshot has a priority or a handoff request", snap.Version)
	}
	if snap.Version < snapshotV9 && c.usesHeadroom() {
		return nil, fmt.Errorf("lease: version %d snapshot has renewal headroom", snap.Version)
	}
	if err := checkSharedSnapshot(&snap); err != nil {
		return nil, err
	}
	if snap.Version < snapshotV6 && (snap.HistoryRetention != nil || len(snap.History) > 0) {
		return nil, fmt.Errorf("lease: version %d snapshot has a lease history", snap.Version)
	}
	if snap.Version < snapshotV4 && len(snap.Sessions) > 0 {
		return nil, fmt.Errorf("lease: version %d snapshot has sessions", snap.Version)
	}
	if snap.Version < snapshotV5 && (len(snap.Delays) > 0 || len(snap.Revoked) > 0) {
		return nil, fmt.Errorf("lease: version %d snapshot has lock-delays or revocations", snap.Version)
	}
	s := New()
	s.now, s.lastToken, s.revision = snap.Now, snap.LastToken, snap.Revision
	for i := range snap.Leases {
		l := &snap.Leases[i]
		if l.Token > s.lastToken {
			return nil, fmt.Errorf("lease: snapshot has token %d above its last token %d", l.Token, s.lastToken)
		}
		if err := checkSlot(snap.Version, s.leases.get(l.Name), l); err != nil {
			return nil, err
		}
		l.Holder, l.Principal = unique.Make(l.Holder).Value(), unique.Make(l.Principal).Value()
		s.leases.set(l.Name, append(s.leases.get(l.Name), l))
		s.pushExpiry(l)
	}
	for _, q := range snap.Queues {
		for _, w := range q.Waiters {
			if snap.Version < snapshotV5 && w.LockDelay != 0 {
				return nil, fmt.Errorf("lease: version %d snapshot has a lock-delay on a waiter of %q", snap.Version, q.Name)
			}
		}
		s.queues[q.Name] = q.Waiters
	}
	for _, k := range snap.KV {
		s.kv[k.Key] = &fence{Token: k.Fence, Entry: k.Entry}
	}
	if err := s.restoreSessions(snap.Sessions); err != nil {
		return nil, err
	}
	if err := s.restoreDelays(snap.Delays, snap.Revoked); err != nil {
		return nil, err
	}
	if err := s.restoreHistory(snap.HistoryRetention, snap.History); err != nil {
		return nil, err
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
	case v < snapshotV5 && l.LockDelay != 0:
		return fmt.Errorf("lease: version %d snapshot has a lock-delay on %q", v, l.Name)
	case l.Shared && l.Limit != 0:
		return fmt.Errorf("lease: snapshot has a shared grant of %q with the limit %d", l.Name, l.Limit)
	case len(ls) > 0 && l.Shared != ls[0].Shared:
		return fmt.Errorf("lease: snapshot has shared and exclusive grants of %q", l.Name)
	case l.Shared && len(ls) >= MaxShared:
		return fmt.Errorf("lease: snapshot has more than %d shared grants of %q", MaxShared, l.Name)
	case l.Shared && len(ls) > 0 && l.Token <= ls[len(ls)-1].Token:
		return fmt.Errorf("lease: snapshot has the grants of %q out of order", l.Name)
	case l.Shared:
		return nil
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
