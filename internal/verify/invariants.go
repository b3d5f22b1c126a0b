package verify

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// Invariant names.
const (
	InvTokensGrow = "tokens-grow"
	InvStaleWrite = "no-stale-write"
	InvDurable    = "acked-writes-durable"
	InvNoOverlap  = "no-overlapping-grants"
	// InvLockDelay: no new grant within the lock-delay of a grant that
	// expired or was revoked.
	InvLockDelay    = "lock-delay-respected"
	InvLinearizable = "linearizable"
	// InvClusterSize: the run ends with at least as many voters as it
	// started with (after a bounded wait for the cluster to regrow).
	InvClusterSize = "cluster-size"
	// InvWorkersRan: every worker process ran to the end of the run. One
	// that died leaves its operation in flight unrecorded, so the
	// histories it took part in are incomplete: a grant the cluster made
	// to its waiting acquire has no call to explain it.
	InvWorkersRan = "workers-ran"
)

// EarlyExitViolations reports the workers that exited before the run
// ended.
func EarlyExitViolations(early []EarlyExit) []Violation {
	var out []Violation
	for _, e := range early {
		out = append(out, Violation{InvWorkersRan, fmt.Sprintf("worker %d exited at %s (%s) after %d operations, before the run ended: its last operation in flight is not in the history, so a failure of the histories it took part in may be the harness's, not the cluster's",
			e.Worker, e.At.UTC().Format("15:04:05.000"), e.State, e.Ops)})
	}
	return out
}

// Membership is the cluster's size as its leader listed it at the start
// of a run and at its end, and the member faults that could not restore
// it.
type Membership struct {
	// Start are the voters once the cluster was up.
	Start []string `json:"start_voters"`
	// End are the voters at the end, when the wait ended; EndLeader is
	// the leader that listed them, "" if none answered.
	End       []string `json:"end_voters"`
	EndLeader string   `json:"end_leader,omitempty"`
	// Awaited is what the end waited for, and Waited how long.
	Awaited string        `json:"awaited"`
	Waited  time.Duration `json:"waited"`
	// Unrestored lists the member faults that could not restore the
	// cluster when they ran.
	Unrestored []string `json:"unrestored,omitempty"`
}

// Check reports cluster-size when the run ended with fewer voters than it
// started with. A run without a start (a summary from before the check)
// has nothing to check.
func (m Membership) Check() []Violation {
	if len(m.Start) == 0 || len(m.End) >= len(m.Start) {
		return nil
	}
	var missing []string
	for _, id := range m.Start {
		if !slices.Contains(m.End, id) {
			missing = append(missing, id)
		}
	}
	leader := "no leader answered"
	if m.EndLeader != "" {
		leader = "leader " + m.EndLeader + " lists voters " + strings.Join(m.End, ", ")
	}
	d := fmt.Sprintf("the cluster began with %d voters (%s) and ended with %d (%s; not voters: %s) after waiting %s for %s",
		len(m.Start), strings.Join(m.Start, ", "), len(m.End), leader, strings.Join(missing, ", "), m.Waited.Round(time.Second), m.Awaited)
	if len(m.Unrestored) > 0 {
		d += fmt.Sprintf("; %d member faults could not restore it, the first: %s", len(m.Unrestored), m.Unrestored[0])
	}
	return []Violation{{InvClusterSize, d}}
}

// FinalValue is the value of a key read after the run ended and the
// cluster healed.
type FinalValue struct {
	Key   string `json:"key"`
	Found bool   `json:"found"`
	Value string `json:"value,omitempty"`
	Token uint64 `json:"token,omitempty"`
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }

type grantRec struct {
	Record
	token uint64
}

// grants returns the successful acquires that made a new grant (first
// sighting of each token), sorted by token.
func grants(h History) []grantRec {
	seen := map[uint64]bool{}
	var out []grantRec
	for _, r := range h {
		if r.Op == OpAcquire && r.Outcome == Ok && !seen[r.OutToken] {
			seen[r.OutToken] = true
			out = append(out, grantRec{r, r.OutToken})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].token < out[j].token })
	return out
}

// CheckInvariants checks the plain invariants on the whole history. final
// may be nil if the final state could not be read. m gives the least real
// time a grant and a lock-delay last.
func CheckInvariants(h History, final map[string]FinalValue, m Model) []Violation {
	var vs []Violation
	vs = append(vs, checkTokens(h)...)
	vs = append(vs, checkStaleWrites(h)...)
	if final != nil {
		vs = append(vs, checkDurable(h, final)...)
	}
	vs = append(vs, checkOverlap(h, m)...)
	return vs
}

// earliestCall returns the earliest time the grant first seen in g can
// have been made: the call of g, or of the earliest of the same worker's
// earlier acquires of the name whose outcome was indeterminate, back to
// its last other use of the name (the grant may have been theirs, and g a
// renewal of it).
func earliestCall(byWorker map[int]History, g Record) int64 {
	call := g.Call
	rs := byWorker[g.Worker]
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		if r.Seq >= g.Seq || r.Name != g.Name {
			continue
		}
		if r.Op == OpAcquire && (r.Outcome == Indeterminate || r.Outcome == Maybe) {
			call = min(call, r.Call)
			continue
		}
		if r.Op == OpGet || r.Op == OpRevoke || (r.Op == OpAcquire && r.Outcome == Held) {
			// A read, or being told "held", does not rule out that an
			// earlier indeterminate acquire is granted after it; nor
			// does a revocation of the name's grant, which may be what
			// granted it (to the worker's own queued waiter).
			continue
		}
		break
	}
	return call
}

// checkTokens: a token names one grant (one name, one holder), and a grant
// that returned before another could have been made has the smaller token.
func checkTokens(h History) []Violation {
	var vs []Violation
	byWorker := map[int]History{}
	for _, r := range h {
		byWorker[r.Worker] = append(byWorker[r.Worker], r)
	}
	for _, rs := range byWorker {
		sort.Slice(rs, func(i, j int) bool {
			if rs[i].Seq != rs[j].Seq {
				return rs[i].Seq < rs[j].Seq
			}
			return !rs[i].Synthetic && rs[j].Synthetic
		})
	}
	owner := map[uint64]Record{}
	var gs []Record
	for _, r := range h {
		if r.Op != OpAcquire || r.Outcome != Ok {
			continue
		}
		if o, ok := owner[r.OutToken]; ok {
			if o.Name != r.Name || o.Holder != r.Holder {
				vs = append(vs, Violation{InvTokensGrow, fmt.Sprintf("token %d granted both to %s on %q and to %s on %q",
					r.OutToken, o.Holder, o.Name, r.Holder, r.Name)})
			}
			if r.Seq < o.Seq && r.Worker == o.Worker {
				owner[r.OutToken] = r
			}
			continue
		}
		owner[r.OutToken] = r
	}
	for _, r := range owner {
		gs = append(gs, r)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].Return < gs[j].Return })
	type byCallRec struct {
		Record
		earliest int64
	}
	var byCall []byCallRec
	for _, g := range gs {
		byCall = append(byCall, byCallRec{g, earliestCall(byWorker, g)})
	}
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].earliest < byCall[j].earliest })
	var maxTok uint64
	var maxRec Record
	k := 0
	for _, g := range byCall {
		for k < len(gs) && gs[k].Return < g.earliest {
			if gs[k].OutToken > maxTok {
				maxTok, maxRec = gs[k].OutToken, gs[k]
			}
			k++
		}
		if maxTok >= g.OutToken {
			vs = append(vs, Violation{InvTokensGrow, fmt.Sprintf("%s was granted token %d on %q no earlier than %s, after token %d had been granted to %s on %q at %s",
				g.Holder, g.OutToken, g.Name, stamp(g.earliest), maxTok, maxRec.Holder, maxRec.Name, stamp(maxRec.Return))})
		}
	}
	return vs
}

// checkStaleWrites: no acknowledged write carried a token older than a
// grant of its lease that had already returned, or lower than a write to
// its key that had already been acknowledged.
func checkStaleWrites(h History) []Violation {
	var vs []Violation
	for name, rs := range h.ByName() {
		gs := grants(rs)
		var puts []Record
		for _, r := range rs {
			if r.Op == OpPut && r.Outcome == Ok {
				puts = append(puts, r)
			}
		}
		for _, p := range puts {
			for _, g := range gs {
				if g.token > p.Token && g.Return < p.Call {
					vs = append(vs, Violation{InvStaleWrite, fmt.Sprintf("%s's write %q to %s with token %d was acknowledged at %s, but token %d of %q had been granted to %s at %s, before the write was sent",
						p.Holder, p.Value, p.Key, p.Token, stamp(p.Return), g.token, name, g.Holder, stamp(g.Return))})
					break
				}
			}
			for _, q := range puts {
				if q.Key == p.Key && q.Return < p.Call && q.Token > p.Token {
					vs = append(vs, Violation{InvStaleWrite, fmt.Sprintf("write %q to %s with token %d acknowledged at %s after a write with the higher token %d had been acknowledged at %s",
						p.Value, p.Key, p.Token, stamp(p.Return), q.Token, stamp(q.Return))})
					break
				}
			}
		}
	}
	return vs
}

// checkDurable: every acknowledged write is in the final state or was
// superseded by a write with a higher token.
func checkDurable(h History, final map[string]FinalValue) []Violation {
	var vs []Violation
	for _, rs := range h.ByName() {
		var oks, maybe []Record
		for _, r := range rs {
			if r.Op == OpPut && (r.Outcome == Ok || r.Outcome == Indeterminate) {
				maybe = append(maybe, r)
				if r.Outcome == Ok {
					oks = append(oks, r)
				}
			}
		}
		if len(oks) == 0 {
			continue
		}
		key := oks[0].Key
		f := final[key]
		var top uint64
		for _, p := range oks {
			top = max(top, p.Token)
		}
		if !f.Found {
			vs = append(vs, Violation{InvDurable, fmt.Sprintf("key %s is missing at the end, but a write with token %d was acknowledged", key, top)})
			continue
		}
		if f.Token > top {
			continue
		}
		if f.Token < top {
			vs = append(vs, Violation{InvDurable, fmt.Sprintf("key %s ends with token %d, but a write with token %d was acknowledged", key, f.Token, top)})
			continue
		}
		// Same token: the final value must come from a write with that
		// token that no acknowledged write with that token followed.
		ok := false
		for _, p := range maybe {
			if p.Token != f.Token || p.Value != f.Value {
				continue
			}
			superseded := false
			for _, q := range oks {
				if q.Token == f.Token && q.Call > p.Return && p.Outcome == Ok {
					superseded = true
				}
			}
			if !superseded {
				ok = true
			}
		}
		if !ok {
			vs = append(vs, Violation{InvDurable, fmt.Sprintf("key %s ends with %q (token %d), which is not the last acknowledged write with that token", key, f.Value, f.Token)})
		}
	}
	return vs
}

// checkOverlap: a grant of a name to a new token cannot have happened
// while the previous grant was certainly still live, i.e. before
// minExpiry had passed since the call of a renewal of it that succeeded,
// unless that grant was released or revoked (no-overlapping-grants); nor
// within its lock-delay after that, or after the call of a revocation
// that ended it (lock-delay-respected). The lock-delay counted is the
// least any acquire that may have set it asked for.
func checkOverlap(h History, m Model) []Violation {
	minExpiry := m.MinExpiry
	var vs []Violation
	for name, rs := range h.ByName() {
		gs := grants(rs)
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			released, revoked := false, false
			var lastRefresh, revokedAt int64
			delay := prev.LockDelay
			for _, r := range rs {
				if r.Token == prev.token && r.Op == OpRelease && r.Outcome != Stale {
					released = true
				}
				if r.Op == OpAcquire && r.Holder == prev.Holder && r.Call >= prev.Call && r.Call < next.Return &&
					(r.Outcome == Ok && r.OutToken == prev.token || r.Outcome == Indeterminate || r.Outcome == Maybe) {
					delay = min(delay, r.LockDelay) // a renewal by the holder sets it
				}
				if r.Op == OpRevoke && r.Call < next.Return {
					switch {
					case r.Outcome == Ok && r.OutToken == prev.token:
						if !revoked || revokedAt > r.Call {
							revokedAt = r.Call
						}
						revoked = true
					case r.Outcome == Indeterminate && (r.Token == 0 || r.Token == prev.token):
						released = true // may have ended it at any time: nothing to check
					}
				}
				if r.Outcome == Ok && ((r.Op == OpRenew && r.Token == prev.token) || (r.Op == OpAcquire && r.OutToken == prev.token)) {
					// Only refreshes that certainly took effect before
					// the next grant did count.
					if r.Return < next.Call {
						lastRefresh = max(lastRefresh, r.Call)
					}
				}
			}
			if released {
				continue
			}
			if revoked {
				if next.Return-revokedAt < m.minDelay(delay) {
					vs = append(vs, Violation{InvLockDelay, fmt.Sprintf("%q was granted to %s (token %d) at %s, within the lock-delay (%s) of %s's grant (token %d), revoked no earlier than %s",
						name, next.Holder, next.token, stamp(next.Return), delay, prev.Holder, prev.token, stamp(revokedAt))})
				}
				continue
			}
			if lastRefresh == 0 {
				continue
			}
			if next.Return-lastRefresh < int64(minExpiry) {
				vs = append(vs, Violation{InvNoOverlap, fmt.Sprintf("%q was granted to %s (token %d) at %s, while %s's grant (token %d), refreshed at %s, could not yet have expired",
					name, next.Holder, next.token, stamp(next.Return), prev.Holder, prev.token, stamp(lastRefresh))})
			} else if next.Return-lastRefresh < int64(minExpiry)+m.minDelay(delay) {
				vs = append(vs, Violation{InvLockDelay, fmt.Sprintf("%q was granted to %s (token %d) at %s, within the lock-delay (%s) of %s's grant (token %d), refreshed at %s, after its expiry",
					name, next.Holder, next.token, stamp(next.Return), delay, prev.Holder, prev.token, stamp(lastRefresh))})
			}
		}
	}
	return vs
}
