package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Client sessions: at most one effect per call.
//
// A client that lost the answer to a request retries it, and the retry
// must not take effect a second time: an acquire whose grant expired
// before the retry would be granted again with a new token (one call,
// two grants), and a retried write or release would be answered as if
// it were new. So every call of a client carries its session (a random
// ID the client makes) and a sequence number, the same for every attempt
// of the call, and the state remembers, per session, the result of every
// seq it applied. A request whose seq has a result gets that result
// again, marked Remembered, and changes nothing. This is client sessions
// as in section 6.3 of the Raft thesis.
//
// Each request also carries the session's floor: the lowest seq of the
// client still in flight, below which every call was answered or given
// up on. The state keeps the highest floor it was told and forgets the
// results below it, and it refuses a request below the floor with
// ErrNotApplied and no effect: its client no longer waits for it, so it
// can only be a delayed copy (a forwarded request that landed after a
// later one of the same client), and applying it would undo something
// newer.
//
// Memory is bounded in three ways:
//   - results below the floor are dropped as the floor rises;
//   - a session idle for SessionTTL of cluster time is gone: the next
//     request of its ID starts a new session (a retry that late may take
//     effect again), and gone sessions are dropped from memory by an
//     OpExpire, or when a new session starts, at most every SessionTTL/2;
//   - a session keeps at most MaxSessionResults results. Past that, the
//     lower half is dropped and the floor raised above it: a retry of
//     one of those calls then gets ErrNotApplied (its first outcome is
//     no longer known; the client reports the call as indeterminate).
//
// Results of a waiting OpAcquire that queued are not final: the waiter
// records its session and seq, and its grant, when it comes, replaces
// the result. A request whose remembered result is still Queued is
// applied again (it keeps its place in the queue, or finds the name
// granted to it, or free after its wait ran out), and its new result
// replaces the old.
//
// Everything here is in cluster time and in the log, so every replica
// remembers the same results; sessions are in the snapshot (version 4).

const (
	// SessionTTL is how long a session is remembered after its last
	// request, in cluster time. It is part of how the log applies: never
	// change it.
	SessionTTL = 10 * time.Minute
	// MaxSessionResults is the most results one session keeps.
	MaxSessionResults = 1024
	// MaxSessionLen is the longest session ID in bytes.
	MaxSessionLen = 64
)

// session is what the state remembers of one client session.
type session struct {
	principal string
	id        string
	floor     uint64
	lastUsed  time.Duration
	results   seqResults // every seq >= floor
}

// seqResults are a session's results by seq. A map of Results would
// store each value in an allocation of its own (Go does so for values
// over 128 bytes), one per op applied; the map here holds the index of
// the result in a slab whose slots are reused as results are dropped.
type seqResults struct {
	idx  map[uint64]int32
	slab []Result
	free []int32
}

func newSeqResults(n int) seqResults {
	return seqResults{idx: make(map[uint64]int32, n)}
}

func (rs *seqResults) len() int { return len(rs.idx) }

// get returns the result of seq, if there is one.
func (rs *seqResults) get(seq uint64) (Result, bool) {
	i, ok := rs.idx[seq]
	if !ok {
		return Result{}, false
	}
	return rs.slab[i], true
}

func (rs *seqResults) has(seq uint64) bool {
	_, ok := rs.idx[seq]
	return ok
}

// set makes r the result of seq.
func (rs *seqResults) set(seq uint64, r Result) {
	if i, ok := rs.idx[seq]; ok {
		rs.slab[i] = r
		return
	}
	var i int32
	if n := len(rs.free); n > 0 {
		i, rs.free = rs.free[n-1], rs.free[:n-1]
		rs.slab[i] = r
	} else {
		i = int32(len(rs.slab))
		rs.slab = append(rs.slab, r)
	}
	rs.idx[seq] = i
}

// drop forgets the result of seq, if there is one.
func (rs *seqResults) drop(seq uint64) {
	i, ok := rs.idx[seq]
	if !ok {
		return
	}
	delete(rs.idx, seq)
	rs.slab[i] = Result{} // let go of what it refers to
	rs.free = append(rs.free, i)
	if len(rs.idx) == 0 {
		// Every slot is free and zero: start over, and let a slab
		// that grew for a burst go.
		rs.slab, rs.free = rs.slab[:0], rs.free[:0]
		if cap(rs.slab) > 64 {
			rs.slab, rs.free = nil, nil
		}
	}
}

// all yields the seqs and results, in no order.
func (rs *seqResults) all(yield func(uint64, Result) bool) {
	for seq, i := range rs.idx {
		if !yield(seq, rs.slab[i]) {
			return
		}
	}
}

// sessionKey keys the sessions by principal too, so a session ID seen by
// one principal answers nothing to another.
type sessionKey struct{ principal, id string }

// sessioned reports whether ops of type t are applied at most once per
// call of a session.
func sessioned(t OpType) bool {
	switch t {
	case OpAcquire, OpRenew, OpRelease, OpPut, OpDelete, OpRevoke:
		return true
	}
	return false
}

func checkSession(op Op) error {
	if op.Session == "" {
		if op.Seq != 0 || op.Floor != 0 {
			return invalidf("seq and floor need a session")
		}
		return nil
	}
	// Printable UTF-8, as names are: a snapshot keeps it as JSON text.
	if err := checkText("session", op.Session, MaxSessionLen); err != nil {
		return err
	}
	if op.Seq == 0 {
		return invalidf("seq is missing (seqs start at 1)")
	}
	if op.Floor > op.Seq {
		return invalidf("floor %d is above seq %d", op.Floor, op.Seq)
	}
	return nil
}

// Sessions returns how many client sessions the state remembers (some
// may be idle past SessionTTL and not dropped yet).
func (s *State) Sessions() int { return len(s.sessions) }

// session returns the live session of op, starting one if there is none
// or the one there is has been idle for SessionTTL.
func (a *applier) session(op Op) *session {
	key := sessionKey{op.Principal, op.Session}
	ss := a.s.sessions[key]
	if ss != nil && a.now-ss.lastUsed < SessionTTL {
		return ss
	}
	if ss == nil {
		a.s.sweepSessions(a.now)
	}
	ss = &session{principal: op.Principal, id: op.Session, results: newSeqResults(0)}
	a.s.sessions[key] = ss
	return ss
}

// sweepSessions drops the sessions idle for SessionTTL at now, at most
// once every SessionTTL/2. Which gone sessions are still in memory never
// changes what Apply does or what a snapshot holds.
func (s *State) sweepSessions(now time.Duration) {
	if now < s.sessionSweep {
		return
	}
	s.sessionSweep = now + SessionTTL/2
	for key, ss := range s.sessions {
		if now-ss.lastUsed >= SessionTTL {
			delete(s.sessions, key)
		}
	}
}

// applySession applies op, which has a session, at most once per seq.
func (a *applier) applySession(op Op) Result {
	ss := a.session(op)
	ss.lastUsed = a.now
	ss.raiseFloor(op.Floor)
	if op.Seq < ss.floor {
		return Result{Err: fmt.Errorf("%w: seq %d, floor %d", ErrNotApplied, op.Seq, ss.floor)}
	}
	if r, ok := ss.results.get(op.Seq); ok && !r.Queued {
		r.Remembered = true
		return r
	}
	r := a.applyOp(op)
	r.Now = a.now
	if !ss.results.has(op.Seq) && ss.results.len() >= MaxSessionResults {
		ss.shed()
		if op.Seq < ss.floor {
			// Among the oldest: remember nothing of it. It took effect,
			// and its answer goes out now; only a retry is refused.
			return r
		}
	}
	if op.Wait && r.Queued {
		a.s.tagWaiter(op)
	}
	ss.results.set(op.Seq, r)
	return r
}

// raiseFloor raises the floor to f and drops the results below it, in
// time proportional to the smaller of the rise and the results kept (so
// amortized O(1) per request: every seq is passed once).
func (ss *session) raiseFloor(f uint64) {
	if f <= ss.floor {
		return
	}
	if f-ss.floor <= uint64(ss.results.len()) {
		for seq := ss.floor; seq < f; seq++ {
			ss.results.drop(seq)
		}
	} else {
		for seq := range ss.results.all {
			if seq < f {
				ss.results.drop(seq)
			}
		}
	}
	ss.floor = f
}

// shed drops the lower half of the results of a session at its cap and
// raises the floor above them.
func (ss *session) shed() {
	seqs := make([]uint64, 0, ss.results.len())
	for seq := range ss.results.all {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	ss.raiseFloor(seqs[len(seqs)/2])
}

// tagWaiter records op's session and seq in its waiter, so its grant
// becomes the result of the call.
func (s *State) tagWaiter(op Op) {
	q := s.queues[op.Name]
	for i := range q {
		if q[i].Holder == op.Holder {
			q[i].Session, q[i].Seq = op.Session, op.Seq
			return
		}
	}
}

// granted records the grant l to waiter w as the result of the call that
// queued it, if its session still waits for that result.
func (a *applier) granted(w waiter, l *Lease) {
	if w.Session == "" {
		return
	}
	ss := a.s.sessions[sessionKey{w.Principal, w.Session}]
	if ss == nil || a.now-ss.lastUsed >= SessionTTL || w.Seq < ss.floor {
		return
	}
	if r, ok := ss.results.get(w.Seq); ok && r.Queued {
		ss.results.set(w.Seq, Result{Lease: *l, Now: a.now})
	}
}

// Snapshot form of the sessions.

type snapshotSession struct {
	ID        string           `json:"id"`
	Principal string           `json:"principal,omitempty"`
	Floor     uint64           `json:"floor"`
	LastUsed  time.Duration    `json:"last_used"`
	Results   []snapshotResult `json:"results"`
}

type snapshotResult struct {
	Seq      uint64          `json:"seq"`
	Now      time.Duration   `json:"now"`
	Err      *snapshotError  `json:"err,omitempty"`
	Lease    *Lease          `json:"lease,omitempty"`
	Queued   bool            `json:"queued,omitempty"`
	Renewed  []snapshotRenew `json:"renewed,omitempty"`
	Revision uint64          `json:"revision,omitempty"`
	// Leases are the grants an OpRevoke ended (version 5).
	Leases []Lease `json:"leases,omitempty"`
}

type snapshotRenew struct {
	Ref   Ref            `json:"ref"`
	Lease *Lease         `json:"lease,omitempty"`
	Err   *snapshotError `json:"err,omitempty"`
	// HandoffRequested is the renewal's handoff request (version 8).
	HandoffRequested string `json:"handoff_requested,omitempty"`
}

// snapshotError is an error of a remembered result.
type snapshotError struct {
	Kind      string        `json:"kind"` // held, stale, forbidden, revoked, not_found, invalid, not_applied
	Name      string        `json:"name,omitempty"`
	Holder    string        `json:"holder,omitempty"`
	Token     uint64        `json:"token,omitempty"`
	Remaining time.Duration `json:"remaining,omitempty"`
	Limit     int           `json:"limit,omitempty"`
	Detail    string        `json:"detail,omitempty"`
	Principal string        `json:"principal,omitempty"`
	Action    string        `json:"action,omitempty"`
	Message   string        `json:"message,omitempty"`
	// LockDelay marks a held error of a lock-delay, and Reason is a
	// revoked error's reason (version 5).
	LockDelay bool          `json:"lock_delay,omitempty"`
	Ended     time.Duration `json:"ended,omitempty"`
	Reason    string        `json:"reason,omitempty"`
}

// captureSessions returns the sessions live at now, sorted by principal
// and ID, results by seq.
func (s *State) captureSessions(now time.Duration) []snapshotSession {
	var out []snapshotSession
	for _, ss := range s.sessions {
		if now-ss.lastUsed >= SessionTTL {
			continue
		}
		c := snapshotSession{ID: ss.id, Principal: ss.principal, Floor: ss.floor, LastUsed: ss.lastUsed,
			Results: make([]snapshotResult, 0, ss.results.len())}
		for seq, r := range ss.results.all {
			c.Results = append(c.Results, resultToSnapshot(seq, r))
		}
		slices.SortFunc(c.Results, func(x, y snapshotResult) int {
			switch {
			case x.Seq < y.Seq:
				return -1
			case x.Seq > y.Seq:
				return 1
			}
			return 0
		})
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y snapshotSession) int {
		if n := strings.Compare(x.Principal, y.Principal); n != 0 {
			return n
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out
}

// v5 reports whether the session's results need snapshot version 5.
func (c snapshotSession) v5() bool {
	for _, r := range c.Results {
		if len(r.Leases) > 0 || r.Err.v5() {
			return true
		}
		for _, rr := range r.Renewed {
			if rr.Err.v5() {
				return true
			}
		}
	}
	return false
}

func (e *snapshotError) v5() bool { return e != nil && (e.Kind == "revoked" || e.LockDelay) }

func resultToSnapshot(seq uint64, r Result) snapshotResult {
	out := snapshotResult{Seq: seq, Now: r.Now, Err: errorToSnapshot(r.Err), Queued: r.Queued, Revision: r.Revision,
		Leases: r.Leases}
	if r.Lease != (Lease{}) {
		l := r.Lease
		out.Lease = &l
	}
	for _, rr := range r.Renewed {
		sr := snapshotRenew{Ref: rr.Ref, Err: errorToSnapshot(rr.Err), HandoffRequested: rr.HandoffRequested}
		if rr.Lease != (Lease{}) {
			l := rr.Lease
			sr.Lease = &l
		}
		out.Renewed = append(out.Renewed, sr)
	}
	return out
}

func (r snapshotResult) result() (Result, error) {
	out := Result{Now: r.Now, Queued: r.Queued, Revision: r.Revision, Leases: r.Leases}
	var err error
	if out.Err, err = r.Err.error(); err != nil {
		return Result{}, err
	}
	if r.Lease != nil {
		out.Lease = *r.Lease
	}
	for _, sr := range r.Renewed {
		rr := RenewResult{Ref: sr.Ref, HandoffRequested: sr.HandoffRequested}
		if rr.Err, err = sr.Err.error(); err != nil {
			return Result{}, err
		}
		if sr.Lease != nil {
			rr.Lease = *sr.Lease
		}
		out.Renewed = append(out.Renewed, rr)
	}
	return out, nil
}

func errorToSnapshot(err error) *snapshotError {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*HeldError](err); ok {
		return &snapshotError{Kind: "held", Name: e.Name, Holder: e.Holder, Token: e.Token, Remaining: e.Remaining, Limit: e.Limit,
			LockDelay: e.LockDelay, Ended: e.Ended}
	}
	if e, ok := errors.AsType[*RevokedError](err); ok {
		return &snapshotError{Kind: "revoked", Name: e.Name, Token: e.Token, Reason: e.Reason}
	}
	if e, ok := errors.AsType[*StaleError](err); ok {
		return &snapshotError{Kind: "stale", Name: e.Name, Token: e.Token, Detail: e.Detail}
	}
	if e, ok := errors.AsType[*ForbiddenError](err); ok {
		return &snapshotError{Kind: "forbidden", Name: e.Name, Token: e.Token, Principal: e.Principal, Action: e.Action}
	}
	kind := "other"
	switch {
	case errors.Is(err, ErrNotFound):
		kind = "not_found"
	case errors.Is(err, ErrInvalid):
		kind = "invalid"
	case errors.Is(err, ErrNotApplied):
		kind = "not_applied"
	}
	return &snapshotError{Kind: kind, Message: err.Error()}
}

// error rebuilds the error: the same type and text as the one written.
func (e *snapshotError) error() (error, error) {
	if e == nil {
		return nil, nil
	}
	// wrapped rebuilds an error made as fmt.Errorf("%w: ...", sentinel).
	wrapped := func(sentinel error) error {
		if e.Message == sentinel.Error() {
			return sentinel
		}
		return fmt.Errorf("%w%s", sentinel, strings.TrimPrefix(e.Message, sentinel.Error()))
	}
	switch e.Kind {
	case "held":
		return &HeldError{Name: e.Name, Holder: e.Holder, Token: e.Token, Remaining: e.Remaining, Limit: e.Limit, LockDelay: e.LockDelay, Ended: e.Ended}, nil
	case "revoked":
		return &RevokedError{Name: e.Name, Token: e.Token, Reason: e.Reason}, nil
	case "stale":
		return &StaleError{Name: e.Name, Token: e.Token, Detail: e.Detail}, nil
	case "forbidden":
		return &ForbiddenError{Name: e.Name, Token: e.Token, Principal: e.Principal, Action: e.Action}, nil
	case "not_found":
		return wrapped(ErrNotFound), nil
	case "invalid":
		return wrapped(ErrInvalid), nil
	case "not_applied":
		return wrapped(ErrNotApplied), nil
	case "other":
		return errors.New(e.Message), nil
	}
	return nil, fmt.Errorf("lease: snapshot has a result with the error kind %q", e.Kind)
}

// restoreSessions adds the sessions of a snapshot to s.
func (s *State) restoreSessions(in []snapshotSession) error {
	for _, c := range in {
		if c.ID == "" {
			return errors.New("lease: snapshot has a session without an ID")
		}
		ss := &session{principal: c.Principal, id: c.ID, floor: c.Floor, lastUsed: c.LastUsed,
			results: newSeqResults(len(c.Results))}
		for _, sr := range c.Results {
			if sr.Seq < c.Floor {
				return fmt.Errorf("lease: snapshot has a result of session %q below its floor", c.ID)
			}
			r, err := sr.result()
			if err != nil {
				return err
			}
			ss.results.set(sr.Seq, r)
		}
		s.sessions[sessionKey{c.Principal, c.ID}] = ss
	}
	return nil
}
