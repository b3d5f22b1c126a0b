package lease

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
	"unique"
)

// Lease history.
//
// Per name, the state keeps its recent terms: every grant (each slot of
// a semaphore is a term of its own) with its holder, token and principal,
// when it started and ended, how it ended, and how many fenced writes of
// the built-in store (OpPut, OpDelete under the name and the term's
// token) were accepted and refused. A term is opened by the op that
// grants it and closed by the op that releases, expires or revokes it,
// inside Apply, so the history is replicated like everything else: it is
// in the log and the snapshot (version 6), and it survives restarts and
// failovers.
//
// Times. Start and End are cluster times, and decide everything
// (retention). StartWall and EndWall are the leader's wall clock as it
// stamped the batch (Batch.Wall), for people to read ("who held it at
// 03:00"); nothing is decided by them. An expired term ended at its
// expiry, which may be before the batch that noticed it: its EndWall is
// that batch's wall clock less the cluster time between the two. A batch
// without a wall clock (written before Batch.Wall existed) gives 0:
// unknown.
//
// Retention (HistoryRetention) is part of the state, set by an
// OpHistoryConfig that the leader proposes when its configuration
// differs from the state's, so every replica keeps the same terms:
//
//   - By age: a term that ended Age or longer ago (in cluster time) is
//     gone for every purpose at once, like a session: reads and
//     snapshots leave it out. It is dropped from memory when its name is
//     next touched, or by the sweep an OpExpire makes at most every
//     Age/16 (the node's expirer proposes one for it), so a name whose
//     lease is gone keeps nothing past Age plus Age/16.
//   - By count: of a name's ended terms, the Terms that ended last (by
//     End, then token) are kept; when another ends, the one that ended
//     first goes. Terms still held are never dropped, so a name keeps at
//     most Terms terms plus its held grants (one for a lease, up to N
//     for a semaphore of limit N).
//
// So a name keeps every term still held and, of its ended terms, the
// Terms that ended last, as long as they ended less than Age ago; the
// property tests check exactly that.
//
// Terms 0 keeps no history. A new State keeps none (its retention is
// the zero HistoryRetention) until an OpHistoryConfig sets one: so a
// state of a log that never set one writes the snapshot bytes of the
// versions before the history existed. The node proposes its
// configuration (DefaultHistoryRetention unless told otherwise) when it
// takes over as leader.

// Ending says how a term ended.
type Ending uint8

// Endings. The values are in snapshots and on the wire: never renumber
// them.
const (
	// EndingNone: the term has not ended (its grant is held, or expired
	// and not yet freed).
	EndingNone     Ending = 0
	EndingReleased Ending = 1
	EndingExpired  Ending = 2
	EndingRevoked  Ending = 3
	// EndingHandedOff: the holder handed the name to a waiter (an
	// OpRelease with Handoff, see handoff.go); the next term started at
	// this term's End.
	EndingHandedOff Ending = 4
)

func (e Ending) String() string {
	switch e {
	case EndingNone:
		return "held"
	case EndingReleased:
		return "released"
	case EndingExpired:
		return "expired"
	case EndingRevoked:
		return "revoked"
	case EndingHandedOff:
		return "handed_off"
	}
	return "unknown"
}

// Term is one grant of a name, as the history keeps it.
type Term struct {
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	Principal string `json:"principal,omitempty"`
	// Limit is the semaphore limit of the grant, 0 for a plain lease.
	Limit int `json:"limit,omitempty"`
	// Start and End are cluster times: of the grant, and of its end
	// (for an expiry, the grant's expiry). End is 0 while the term has
	// not ended.
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end,omitempty"`
	// StartWall and EndWall are the leader's wall clock at Start and End
	// in Unix nanoseconds, for display only; 0 when unknown.
	StartWall int64  `json:"start_wall,omitempty"`
	EndWall   int64  `json:"end_wall,omitempty"`
	Ending    Ending `json:"ending,omitempty"`
	// Reason is the operator's reason of a revocation.
	Reason string `json:"reason,omitempty"`
	// Accepted and Refused count the fenced writes (OpPut, OpDelete)
	// under the term's token: accepted, and refused by fencing (the
	// grant had ended, a key had a higher token, another principal).
	Accepted uint64 `json:"accepted,omitempty"`
	Refused  uint64 `json:"refused,omitempty"`
	// Shared is true for the term of a shared grant (see shared.go).
	Shared bool `json:"shared,omitempty"`
}

// HistoryRetention is how much history the state keeps.
type HistoryRetention struct {
	// Terms is the most terms kept per name. 0 keeps no history.
	Terms int
	// Age is how long a term is kept after it ended, in cluster time.
	Age time.Duration
}

// DefaultHistoryRetention is the retention a node proposes unless told
// otherwise: 16 terms per name, for 24 hours.
func DefaultHistoryRetention() HistoryRetention {
	return HistoryRetention{Terms: 16, Age: 24 * time.Hour}
}

// Bounds of a retention (checked by Validate).
const (
	MaxHistoryTerms = 10000
	MinHistoryAge   = time.Second
	MaxHistoryAge   = 366 * 24 * time.Hour
)

func checkRetention(r HistoryRetention) error {
	if r.Terms < 0 || r.Terms > MaxHistoryTerms {
		return invalidf("history terms %d is out of range: 0 to %d", r.Terms, MaxHistoryTerms)
	}
	if r.Age < MinHistoryAge || r.Age > MaxHistoryAge {
		return invalidf("history age %s is out of range: %s to %s", r.Age, MinHistoryAge, MaxHistoryAge)
	}
	return nil
}

// HistoryConfigOp returns the op that sets the retention to r.
func HistoryConfigOp(r HistoryRetention) Op {
	return Op{Type: OpHistoryConfig, Limit: r.Terms, TTL: r.Age}
}

// termHistory is the state's record of terms.
//
// A term still held is not stored here: it is its grant (a Lease with
// termed set, which also keeps the term's StartWall), and its counts of
// fenced writes, if it had any, are in writes. Only when the term ends
// does it become a Term in byName. So a name that has only ever had the
// grant it holds costs the history nothing but a field of the grant: at
// a million leases, a Term and a map entry per lease would be more than
// half of the state's memory.
type termHistory struct {
	retention HistoryRetention
	// byName holds each name's ended terms in the order granted (by
	// token). A snapshot's held term whose grant it does not hold (none
	// is written so) would stay here too, unended.
	byName map[string][]Term
	// writes counts the fenced writes of held terms that had any, by
	// token.
	writes map[uint64]*termWrites
	// sweep is the cluster time of the next sweep (not in snapshots:
	// which gone terms are still in memory changes nothing).
	sweep time.Duration
	// due is the earliest time a kept term is gone (its end plus Age),
	// valid if hasDue: a lower bound, kept by closed and the sweep, that
	// tells the node when a sweep has something to drop.
	due    time.Duration
	hasDue bool
}

// noteEnd records that a term that ended at end is kept.
func (h *termHistory) noteEnd(end time.Duration) {
	if at := end + h.retention.Age; !h.hasDue || at < h.due {
		h.due, h.hasDue = at, true
	}
}

// termWrites counts the fenced writes of a held term.
type termWrites struct{ accepted, refused uint64 }

func newTermHistory() termHistory {
	return termHistory{byName: make(map[string][]Term), writes: make(map[uint64]*termWrites)}
}

// held returns the term of the held grant l (termed).
func (h *termHistory) held(l *Lease) Term {
	t := Term{
		Holder: l.Holder, Token: l.Token, Principal: l.Principal, Limit: l.Limit,
		Start: l.GrantedAt, StartWall: l.startWall, Shared: l.Shared,
	}
	if len(h.writes) > 0 {
		if w := h.writes[l.Token]; w != nil {
			t.Accepted, t.Refused = w.accepted, w.refused
		}
	}
	return t
}

// gone reports whether t is past the age limit at now.
func (h *termHistory) gone(t *Term, now time.Duration) bool {
	return t.Ending != EndingNone && now-t.End >= h.retention.Age
}

// trim drops the terms of name gone at now, and then, while more than
// Terms of them have ended, the one that ended first (by End, then
// token). So the ended terms kept are always the Terms that ended last,
// less those gone: which ones were added in which order never matters.
func (h *termHistory) trim(name string, now time.Duration) {
	ts, ok := h.byName[name]
	if !ok {
		return
	}
	h.set(name, h.trimmed(ts, now, h.mayBeGone(now)))
}

// set makes ts the terms of name; none removes the name.
func (h *termHistory) set(name string, ts []Term) {
	if len(ts) == 0 {
		delete(h.byName, name)
		return
	}
	h.byName[name] = ts
}

// mayBeGone reports whether any kept term may be gone at now: due is a
// lower bound of when the first one is.
func (h *termHistory) mayBeGone(now time.Duration) bool {
	return h.hasDue && h.due <= now
}

// trimmed returns ts trimmed as trim does, in place; it looks for gone
// terms only if dropGone.
func (h *termHistory) trimmed(ts []Term, now time.Duration, dropGone bool) []Term {
	if dropGone {
		kept := ts[:0]
		for i := range ts {
			if !h.gone(&ts[i], now) {
				kept = append(kept, ts[i])
			}
		}
		clear(ts[len(kept):])
		ts = kept
	}
	ended := 0
	for i := range ts {
		if ts[i].Ending != EndingNone {
			ended++
		}
	}
	for ; ended > h.retention.Terms; ended-- {
		first := -1
		for i := range ts {
			if ts[i].Ending == EndingNone {
				continue
			}
			if first < 0 || ts[i].End < ts[first].End {
				first = i // ties: the lower token, which comes first
			}
		}
		ts = slices.Delete(ts, first, first+1)
	}
	return ts
}

// find returns the term of name with token, or nil.
func (h *termHistory) find(name string, token uint64) *Term {
	ts := h.byName[name]
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i].Token == token {
			return &ts[i]
		}
	}
	return nil
}

// sweepEvery is how often an OpExpire sweeps gone terms from memory.
func (h *termHistory) sweepEvery() time.Duration {
	return max(h.retention.Age/16, time.Second)
}

// sweepHistory drops every term gone at now, at most once every
// Age/16. Which gone terms are still in memory never changes what Apply
// does or what a snapshot holds.
func (s *State) sweepHistory(now time.Duration) {
	h := &s.history
	if now < h.sweep {
		return
	}
	h.sweep = now + h.sweepEvery()
	for name, ts := range h.byName {
		// Every name, and every term's age: a new retention's shorter
		// Age makes terms gone before the due time says.
		h.set(name, h.trimmed(ts, now, true))
	}
	// Every gone term is dropped: due starts again from those kept.
	h.hasDue = false
	for _, ts := range h.byName {
		for i := range ts {
			if ts[i].Ending != EndingNone {
				h.noteEnd(ts[i].End)
			}
		}
	}
}

// NextHistorySweep returns the cluster time at which an OpExpire would
// next sweep a gone term from memory, and false if no ended term is
// kept. The node's expirer proposes an OpExpire then, so that a name
// whose lease is gone does not keep its history past the age limit for
// want of an OpExpire.
func (s *State) NextHistorySweep() (time.Duration, bool) {
	h := &s.history
	if !h.hasDue {
		return 0, false
	}
	return max(h.due, h.sweep), true
}

// HistoryRetention returns the retention the state applies.
func (s *State) HistoryRetention() HistoryRetention { return s.history.retention }

// History returns the terms of name kept at the cluster time of the last
// applied batch, oldest first. It does not change the state.
func (s *State) History(name string) []Term {
	return s.visibleHistory(name, s.now)
}

// visibleHistory returns the terms of name kept at now, in the order
// granted: its ended terms not gone, and its held ones.
func (s *State) visibleHistory(name string, now time.Duration) []Term {
	h := &s.history
	var out []Term
	ended := h.byName[name]
	i := 0
	endedBefore := func(token uint64) {
		for ; i < len(ended) && ended[i].Token < token; i++ {
			if !h.gone(&ended[i], now) {
				out = append(out, ended[i])
			}
		}
	}
	for _, l := range s.leases.get(name) { // by token
		if l.termed {
			endedBefore(l.Token)
			out = append(out, h.held(l))
		}
	}
	endedBefore(s.lastToken + 1)
	return out
}

// termed reports whether any grant of name has its term kept.
func (s *State) termed(name string) bool {
	return slices.ContainsFunc(s.leases.get(name), func(l *Lease) bool { return l.termed })
}

// historyNames yields each name with a kept term at now, once, in no
// particular order.
func (s *State) historyNames(now time.Duration) iter.Seq[string] {
	return func(yield func(string) bool) {
		for name, ls := range s.leases.all() {
			if slices.ContainsFunc(ls, func(l *Lease) bool { return l.termed }) && !yield(name) {
				return
			}
		}
		for name, ts := range s.history.byName {
			if s.termed(name) {
				continue // yielded above
			}
			if slices.ContainsFunc(ts, func(t Term) bool { return !s.history.gone(&t, now) }) && !yield(name) {
				return
			}
		}
	}
}

// HistoryNames returns the names with the prefix that have kept terms,
// in no particular order.
func (s *State) HistoryNames(prefix string) []string {
	var out []string
	for name := range s.historyNames(s.now) {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}

// HistoryTerms returns how many terms are in memory, gone ones not yet
// swept included: the ended ones and the grants whose terms are kept.
func (s *State) HistoryTerms() int {
	n := 0
	for _, ts := range s.history.byName {
		n += len(ts)
	}
	for _, ls := range s.leases.all() {
		for _, l := range ls {
			if l.termed {
				n++
			}
		}
	}
	return n
}

// wallAt returns the wall clock to record for cluster time at, a time
// at or before the batch's: the batch's wall clock less the difference.
func (a *applier) wallAt(at time.Duration) int64 {
	if a.wall == 0 {
		return 0
	}
	return a.wall - int64(a.now-at)
}

// opened starts the term of the new grant l, before l is stored: the
// grant itself is the term while it is held.
func (a *applier) opened(l *Lease) {
	h := &a.s.history
	if h.retention.Terms == 0 {
		return
	}
	l.termed, l.startWall = true, a.wallAt(l.GrantedAt)
	if h.mayBeGone(a.now) {
		// Touching a name drops its gone terms (a new term changes
		// no count of ended ones).
		h.trim(l.Name, a.now)
	}
}

// closed records the end of the term of grant l, which leaves the
// state: at its expiry for an expiry, else now.
func (a *applier) closed(l *Lease, e Ending, reason string) {
	h := &a.s.history
	if !l.termed {
		return
	}
	ts := h.byName[l.Name]
	i, found := slices.BinarySearchFunc(ts, l.Token, func(t Term, token uint64) int { return cmp.Compare(t.Token, token) })
	if found {
		return // ended already
	}
	end := a.now
	if e == EndingExpired {
		end = min(l.ExpiresAt, a.now)
	}
	t := h.held(l)
	if len(h.writes) > 0 {
		delete(h.writes, l.Token)
	}
	t.End, t.EndWall, t.Ending = end, a.wallAt(end), e
	if reason != "" {
		t.Reason = unique.Make(reason).Value()
	}
	if len(ts) == cap(ts) {
		// Grow to Terms+1 at once, not to twice: a name keeps Terms
		// ended terms, and one more until it is trimmed below.
		grown := make([]Term, len(ts), max(min(2*len(ts), h.retention.Terms+1), len(ts)+len(ts)/4+1))
		copy(grown, ts)
		ts = grown
	}
	ts = slices.Insert(ts, i, t)
	h.noteEnd(end)
	h.set(l.Name, h.trimmed(ts, a.now, h.mayBeGone(a.now)))
}

// wrote counts a fenced write under (name, token): accepted or refused.
func (a *applier) wrote(name string, token uint64, err error) {
	h := &a.s.history
	var accepted, refused *uint64
	if t := h.find(name, token); t != nil {
		if h.gone(t, a.now) {
			return
		}
		accepted, refused = &t.Accepted, &t.Refused
	} else {
		i := slices.IndexFunc(a.s.leases.get(name), func(l *Lease) bool { return l.Token == token })
		if i < 0 || !a.s.leases.get(name)[i].termed {
			return
		}
		w := h.writes[token]
		if w == nil {
			w = &termWrites{}
			h.writes[token] = w
		}
		accepted, refused = &w.accepted, &w.refused
	}
	if err == nil {
		*accepted++
	} else {
		*refused++
	}
}

// setRetention applies an OpHistoryConfig.
func (a *applier) setRetention(op Op) Result {
	r := HistoryRetention{Terms: op.Limit, Age: op.TTL}
	if err := checkRetention(r); err != nil {
		return Result{Err: err}
	}
	h := &a.s.history
	h.retention = r
	if r.Terms == 0 {
		clear(h.byName)
		clear(h.writes)
		for _, ls := range a.s.leases.all() {
			for _, l := range ls {
				if l.termed {
					a.s.update(l, func(l *Lease) { l.termed, l.startWall = false, 0 })
				}
			}
		}
	}
	h.sweep = 0
	a.s.sweepHistory(a.now)
	return Result{}
}

// captureHistory copies the terms kept at now, by name.
func (s *State) captureHistory(now time.Duration) []snapshotHistory {
	var out []snapshotHistory
	for name := range s.historyNames(now) {
		out = append(out, snapshotHistory{Name: name, Terms: s.visibleHistory(name, now)})
	}
	return out
}

// snapshotHistory is one name's terms in a snapshot (version 6).
type snapshotHistory struct {
	Name  string `json:"name"`
	Terms []Term `json:"terms"`
}

// snapshotRetention is the retention in a snapshot (version 6), written
// when it is not the default.
type snapshotRetention struct {
	Terms int           `json:"terms"`
	Age   time.Duration `json:"age"`
}

func (s *State) restoreHistory(r *snapshotRetention, hs []snapshotHistory) error {
	if r != nil {
		ret := HistoryRetention{Terms: r.Terms, Age: r.Age}
		if err := checkRetention(ret); err != nil {
			return fmt.Errorf("lease: snapshot has a bad history retention: %w", err)
		}
		s.history.retention = ret
	}
	for _, nh := range hs {
		if _, dup := s.history.byName[nh.Name]; dup || len(nh.Terms) == 0 {
			return fmt.Errorf("lease: snapshot has the history of %q twice or empty", nh.Name)
		}
		for i := range nh.Terms {
			t := &nh.Terms[i]
			if t.Token == 0 || t.Token > s.lastToken || (i > 0 && t.Token <= nh.Terms[i-1].Token) {
				return fmt.Errorf("lease: snapshot has a bad token %d in the history of %q", t.Token, nh.Name)
			}
			if t.Ending > EndingHandedOff {
				return fmt.Errorf("lease: snapshot has an unknown ending %d in the history of %q", t.Ending, nh.Name)
			}
			t.Holder, t.Principal, t.Reason = unique.Make(t.Holder).Value(), unique.Make(t.Principal).Value(), unique.Make(t.Reason).Value()
			if t.Ending != EndingNone {
				s.history.noteEnd(t.End)
			}
		}
		// A held term is its grant again; the ended ones (and a held
		// one whose grant the snapshot does not hold) are kept as
		// they are.
		ended := nh.Terms[:0:0]
		for _, t := range nh.Terms {
			if t.Ending == EndingNone && s.restoreHeld(nh.Name, t) {
				continue
			}
			ended = append(ended, t)
		}
		if len(ended) > 0 {
			s.history.byName[nh.Name] = ended
		}
	}
	return nil
}

// restoreHeld makes the grant of name with t's token, if the restored
// state holds it and it matches t, the held term t, and reports whether
// it did. The grants are the restore's own: nothing else has them yet.
func (s *State) restoreHeld(name string, t Term) bool {
	for _, l := range s.leases.get(name) {
		if l.Token != t.Token {
			continue
		}
		if l.Holder != t.Holder || l.Principal != t.Principal || l.Limit != t.Limit || l.GrantedAt != t.Start || l.Shared != t.Shared {
			return false
		}
		l.termed, l.startWall = true, t.StartWall
		if t.Accepted != 0 || t.Refused != 0 {
			s.history.writes[t.Token] = &termWrites{accepted: t.Accepted, refused: t.Refused}
		}
		return true
	}
	return false
}
