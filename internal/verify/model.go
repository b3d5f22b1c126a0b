package verify

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of one lease name and its key, checked per name.
//
// The state is the current grant (holder, token, live or not), the time
// before which it cannot have expired, the highest token granted for the
// name, and the key's value and writing token. Expiry happens in cluster
// time, which clients cannot see; the model lets a lease expire only once
// at least minExpiry of real time has passed since the *call* of the last
// grant or renewal that took effect (cluster time never runs faster than
// the fastest leader clock, and stands still without a leader, so a lease
// can outlive its TTL in real time but never end sooner than
// TTL/maxClockRate). Indeterminate operations have no return time
// (porcupine places them anywhere after their call) and may or may not
// take effect.

// leaseState is a value type so that porcupine can compare states with ==.
type leaseState struct {
	Live       bool   // a grant exists and has not been seen to end
	Holder     string // holder of the current (or last) grant
	Token      uint64 // its token, if TokenKnown
	TokenKnown bool   // false after a grant whose answer was lost
	Refresh    int64  // call time of the last grant/renewal that took effect
	MaxToken   uint64 // highest token known to have been granted
	// Delay is the lock-delay of the current (or last) grant.
	Delay time.Duration
	// Delayed: the last grant ended without a release (it expired or
	// was revoked) and had a lock-delay, which may still be in force;
	// FreeAt is the earliest real time it can have passed, before which
	// no new grant can take effect.
	Delayed  bool
	FreeAt   int64
	KeySet   bool
	KeyValue string
	KeyToken uint64
}

// Model checks histories of one lease name.
type Model struct {
	// MinExpiry is the least real time a grant or renewal lasts.
	MinExpiry time.Duration
	// DelayScale is the least real time a lock-delay lasts, per unit of
	// its length (cluster time runs at most this much slower than
	// 1/scale: 0.99 divided by the fastest clock rate). 0 counts a
	// lock-delay as no time (weaker: only for histories without them).
	DelayScale float64
}

// minDelay is the least real time a lock-delay of d lasts.
func (m Model) minDelay(d time.Duration) int64 { return int64(float64(d) * m.DelayScale) }

// canExpire reports whether the current grant may have ended by the time
// an operation returning at ret took effect.
func (m Model) canExpire(s leaseState, ret int64) bool {
	return !s.Live || ret-s.Refresh >= int64(m.MinExpiry)
}

// canGrant reports whether a new grant may have been made by the time an
// operation returning at ret took effect: the current grant may have
// expired and its lock-delay passed, or the last grant ended and its
// lock-delay may have passed.
func (m Model) canGrant(s leaseState, ret int64) bool {
	if s.Live {
		return ret-s.Refresh >= int64(m.MinExpiry)+m.minDelay(s.Delay)
	}
	return !s.Delayed || ret >= s.FreeAt
}

// expired is s once its live grant expired (without a release): its
// lock-delay, if any, runs from the expiry, no earlier than MinExpiry
// after the last refresh.
func (m Model) expired(s leaseState) leaseState {
	n := s
	n.Live = false
	n.Delayed, n.FreeAt = s.Delay > 0, 0
	if n.Delayed {
		n.FreeAt = s.Refresh + int64(m.MinExpiry) + m.minDelay(s.Delay)
	}
	return n
}

// revoked is s once its live grant was revoked by an op called at call:
// its lock-delay runs from the revocation.
func (m Model) revoked(s leaseState, call int64) leaseState {
	n := s
	n.Live = false
	n.Delayed, n.FreeAt = s.Delay > 0, 0
	if n.Delayed {
		n.FreeAt = call + m.minDelay(s.Delay)
	}
	return n
}

// matches reports whether the grant holder#token is s's current (or last)
// grant, and returns s with the token learnt if it was unknown.
func (m Model) matches(s leaseState, holder string, token uint64) (leaseState, bool) {
	if s.Holder != holder {
		return s, false
	}
	if s.TokenKnown {
		return s, s.Token == token
	}
	if token <= s.MaxToken {
		return s, false
	}
	s.Token, s.TokenKnown, s.MaxToken = token, true, token
	return s, true
}

func (m Model) isCurrent(s leaseState, token uint64) bool {
	return s.Live && s.TokenKnown && s.Token == token
}

// step returns every state the op can lead to; none means illegal.
func (m Model) step(s leaseState, r Record) []leaseState {
	switch r.Op {
	case OpAcquire:
		return m.acquire(s, r)
	case OpRenew:
		return m.renewOrRelease(s, r)
	case OpRelease:
		return m.renewOrRelease(s, r)
	case OpPut:
		return m.put(s, r)
	case OpRevoke:
		return m.revoke(s, r)
	case OpGet:
		switch r.Outcome {
		case Ok:
			if s.KeySet && s.KeyValue == r.OutValue && s.KeyToken == r.OutToken {
				return []leaseState{s}
			}
			return nil
		case NotFound:
			if !s.KeySet {
				return []leaseState{s}
			}
			return nil
		}
		return []leaseState{s}
	}
	return nil
}

func (m Model) grant(s leaseState, r Record, token uint64, known bool) leaseState {
	s.Live, s.Holder, s.Token, s.TokenKnown, s.Refresh = true, r.Holder, token, known, r.Call
	s.Delay, s.Delayed, s.FreeAt = r.LockDelay, false, 0
	if token > s.MaxToken {
		s.MaxToken = token
	}
	return s
}

func (m Model) acquire(s leaseState, r Record) []leaseState {
	switch r.Outcome {
	case Ok:
		t := r.OutToken
		if s.Live && s.Holder == r.Holder && (!s.TokenKnown && t > s.MaxToken || s.TokenKnown && t == s.Token) {
			// A renewal by the holder (of a grant whose answer was lost,
			// or of the known one): same token.
			n := s
			n.Token, n.TokenKnown = t, true
			n.Refresh = max(n.Refresh, r.Call)
			n.Delay = r.LockDelay // an acquire by the holder sets its lock-delay
			if t > n.MaxToken {
				n.MaxToken = t
			}
			out := []leaseState{n}
			if !s.TokenKnown && m.canGrant(s, r.Return) {
				out = append(out, m.grant(s, r, t, true))
			}
			return out
		}
		if t > s.MaxToken && m.canGrant(s, r.Return) {
			return []leaseState{m.grant(s, r, t, true)}
		}
		return nil
	case Held:
		if r.Delayed {
			// The name is in the lock-delay of the grant the answer
			// names: it ended without a release (expired, or revoked),
			// and it had a lock-delay.
			if s.Live {
				if !m.canExpire(s, r.Return) || s.Delay == 0 {
					return nil
				}
				n, ok := m.matches(s, r.OutHolder, r.OutToken)
				if !ok {
					return nil
				}
				return []leaseState{m.expired(n)}
			}
			if !s.Delayed {
				return nil // released, or no lock-delay: nothing holds the name
			}
			if n, ok := m.matches(s, r.OutHolder, r.OutToken); ok {
				return []leaseState{n}
			}
			return nil
		}
		if !s.Live || s.Holder == r.Holder || (r.OutHolder != "" && r.OutHolder != s.Holder) {
			return nil
		}
		if r.OutToken == 0 {
			return []leaseState{s}
		}
		if s.TokenKnown {
			if s.Token != r.OutToken {
				return nil
			}
			return []leaseState{s}
		}
		if r.OutToken <= s.MaxToken {
			return nil
		}
		n := s
		n.Token, n.TokenKnown, n.MaxToken = r.OutToken, true, r.OutToken
		return []leaseState{n}
	case Indeterminate, Maybe:
		// An indeterminate op may take effect at any later time; a Maybe
		// op only before its return.
		at := int64(math.MaxInt64)
		if r.Outcome == Maybe {
			at = r.Return
		}
		out := []leaseState{s}
		if s.Live && s.Holder == r.Holder && s.Delay != r.LockDelay {
			// A renewal by the holder, which sets its lock-delay
			// (leaving Refresh alone is the weaker, sound choice).
			n := s
			n.Delay = r.LockDelay
			out = append(out, n)
		}
		if m.canGrant(s, at) {
			// A grant whose token nobody learned.
			n := m.grant(s, r, 0, false)
			out = append(out, n)
		}
		return out
	}
	return []leaseState{s}
}

// revoke: an operator's revocation of the live grant (of r.Token, or any).
func (m Model) revoke(s leaseState, r Record) []leaseState {
	switch r.Outcome {
	case Ok:
		if !s.Live || (r.Token != 0 && r.Token != r.OutToken) {
			return nil
		}
		n, ok := m.matches(s, r.OutHolder, r.OutToken)
		if !ok {
			return nil
		}
		return []leaseState{m.revoked(n, r.Call)}
	case NotFound:
		if !s.Live {
			return []leaseState{s}
		}
		var out []leaseState
		if r.Token != 0 && (!s.TokenKnown || s.Token != r.Token) {
			out = append(out, s) // another grant than the one asked for
		}
		if (r.Token == 0 || !s.TokenKnown || s.Token == r.Token) && m.canExpire(s, r.Return) {
			out = append(out, m.expired(s)) // it had expired
		}
		return out
	case Indeterminate:
		out := []leaseState{s}
		if s.Live && (r.Token == 0 || !s.TokenKnown || s.Token == r.Token) {
			out = append(out, m.revoked(s, r.Call))
		}
		return out
	}
	return []leaseState{s}
}

// stale returns the states after a fenced op with token t was refused.
func (m Model) stale(s leaseState, r Record, t uint64, keyTooNew bool) []leaseState {
	if !m.isCurrent(s, t) || keyTooNew {
		return []leaseState{s}
	}
	if !m.canExpire(s, r.Return) {
		return nil
	}
	return []leaseState{m.expired(s)} // it expired, and stays ended
}

func (m Model) renewOrRelease(s leaseState, r Record) []leaseState {
	switch r.Outcome {
	case Ok:
		if !m.isCurrent(s, r.Token) {
			return nil
		}
		n := s
		if r.Op == OpRelease {
			n.Live, n.Delayed, n.FreeAt = false, false, 0 // a release skips the lock-delay
		} else {
			n.Refresh = max(n.Refresh, r.Call)
		}
		return []leaseState{n}
	case Stale:
		return m.stale(s, r, r.Token, false)
	case Indeterminate:
		out := []leaseState{s}
		if r.Op == OpRelease && m.isCurrent(s, r.Token) {
			n := s
			n.Live, n.Delayed, n.FreeAt = false, false, 0
			out = append(out, n)
		}
		// A renewal that may have happened only makes expiry later;
		// leaving Refresh alone is the weaker, sound choice.
		return out
	}
	return []leaseState{s}
}

func (m Model) put(s leaseState, r Record) []leaseState {
	keyTooNew := s.KeySet && r.Token < s.KeyToken
	applied := func() leaseState {
		n := s
		n.KeySet, n.KeyValue, n.KeyToken = true, r.Value, r.Token
		return n
	}
	switch r.Outcome {
	case Ok:
		if !m.isCurrent(s, r.Token) || keyTooNew {
			return nil
		}
		return []leaseState{applied()}
	case Stale:
		return m.stale(s, r, r.Token, keyTooNew)
	case Indeterminate:
		out := []leaseState{s}
		if m.isCurrent(s, r.Token) && !keyTooNew {
			out = append(out, applied())
		}
		return out
	}
	return []leaseState{s}
}

// Porcupine returns the porcupine model.
func (m Model) Porcupine() porcupine.Model {
	return m.porcupineFrom([]leaseState{{}})
}

// porcupineFrom returns the porcupine model with init as the possible
// start states.
func (m Model) porcupineFrom(init []leaseState) porcupine.Model {
	nd := porcupine.NondeterministicModel{
		Init: func() []interface{} { return toIfaces(init) },
		Step: func(state, input, output interface{}) []interface{} {
			return toIfaces(m.step(state.(leaseState), input.(Record)))
		},
		DescribeOperation: func(input, output interface{}) string {
			return describe(input.(Record))
		},
		DescribeState: func(state interface{}) string {
			s := state.(leaseState)
			lease := "free"
			if s.Live {
				tok := "?"
				if s.TokenKnown {
					tok = fmt.Sprint(s.Token)
				}
				lease = fmt.Sprintf("%s#%s", s.Holder, tok)
			}
			key := "unset"
			if s.KeySet {
				key = fmt.Sprintf("%q@%d", s.KeyValue, s.KeyToken)
			}
			if s.Delay > 0 {
				lease += fmt.Sprintf(" (lock-delay %s)", s.Delay)
			}
			if s.Delayed {
				lease += fmt.Sprintf(", delayed until at least %s", stamp(s.FreeAt))
			}
			return fmt.Sprintf("lease %s, max token %d, key %s", lease, s.MaxToken, key)
		},
	}
	pm := nd.ToModel()
	pm.Partition = nil
	return pm
}

func describe(r Record) string {
	var in string
	switch r.Op {
	case OpAcquire:
		in = fmt.Sprintf("acquire(%s)", r.Holder)
		if r.Wait {
			in = fmt.Sprintf("acquire_wait(%s)", r.Holder)
		}
	case OpRenew, OpRelease:
		in = fmt.Sprintf("%s(%s#%d)", r.Op, r.Holder, r.Token)
	case OpPut:
		in = fmt.Sprintf("put(%s, %q, #%d)", r.Key, r.Value, r.Token)
	case OpGet:
		in = fmt.Sprintf("get(%s)", r.Key)
	case OpRevoke:
		in = fmt.Sprintf("revoke(#%d)", r.Token)
	}
	if r.LockDelay > 0 {
		in = strings.TrimSuffix(in, ")") + fmt.Sprintf(", lock-delay %s)", r.LockDelay)
	}
	out := r.Outcome
	switch {
	case r.Op == OpAcquire && r.Outcome == Ok:
		out = fmt.Sprintf("ok #%d", r.OutToken)
	case r.Outcome == Held && r.Delayed:
		out = fmt.Sprintf("in the lock-delay of %s#%d", r.OutHolder, r.OutToken)
	case r.Outcome == Held:
		out = fmt.Sprintf("held by %s#%d", r.OutHolder, r.OutToken)
	case r.Op == OpRevoke && r.Outcome == Ok:
		out = fmt.Sprintf("revoked %s#%d", r.OutHolder, r.OutToken)
	case r.Op == OpGet && r.Outcome == Ok:
		out = fmt.Sprintf("%q@%d", r.OutValue, r.OutToken)
	}
	return in + " -> " + out
}

// Operations converts a history of one name into porcupine operations.
// Indeterminate operations never return: their return time is after
// every other event.
func Operations(h History) []porcupine.Operation {
	var end int64
	for _, r := range h {
		end = max(end, r.Return, r.Call)
	}
	ops := make([]porcupine.Operation, 0, len(h))
	for _, r := range h {
		ret := r.Return
		if r.Outcome == Indeterminate {
			ret = end + 1
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Worker, Input: r, Call: r.Call, Output: r.Outcome, Return: ret})
	}
	return ops
}

// LinearizabilityResult is the verdict for one name.
type LinearizabilityResult struct {
	Name     string
	Ops      int // recorded operations, not counting synthetic ones
	Segments []Segment
	Result   porcupine.CheckResult
	// Visual is porcupine's account of the illegal segment, if any.
	Visual *visual
}

// CheckLinearizable checks every name's history, segment by segment (see
// segments.go), with indeterminate ops taking effect within window of
// their call; timeout bounds the search per name.
func CheckLinearizable(m Model, h History, window, timeout time.Duration) []LinearizabilityResult {
	var out []LinearizabilityResult
	byName := h.ByName()
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		rs := byName[name]
		res, segs, vis := m.checkSegments(rs, window, timeout)
		real := 0
		for _, r := range rs {
			if !r.Synthetic {
				real++
			}
		}
		out = append(out, LinearizabilityResult{Name: name, Ops: real, Segments: segs, Result: res, Visual: vis})
	}
	return out
}
