package verify

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Checking long histories in segments.
//
// porcupine searches one name's whole history at once, and an
// indeterminate op, which has no return, stays concurrent with everything
// after it; a 10-minute history could not be decided in a minute. So each
// name's history is cut into segments at quiescent points, and the
// segments are checked one after another, each from every state the
// previous one can end in:
//
//   - An indeterminate op takes effect, if ever, within EffectWindow of its
//     call: its requests live at most as long as the op's context (5s), a
//     proposal whose caller has gone is dropped, and a raft entry appended
//     before that is committed by the first leader elected after it, or
//     never; the nemesis never leaves the cluster without a leader for
//     more than a few seconds. Its return is taken as call+EffectWindow.
//     An indeterminate read or renewal changes nothing in the model and
//     is left out. An acquire the client reports as indeterminate only
//     because a retry was answered "held" after an earlier attempt may
//     have been granted (B1b) took effect, if at all, before that answer:
//     the answer came from a leader that had committed its term's barrier,
//     so every earlier attempt's entry was applied before it or never will
//     be, and a retry leaves the wait queue (7aae23d); it is bounded by its
//     return.
//   - A cut is a time that no op's interval (with that return) spans:
//     every op before it returned before every op after it was called,
//     so in every linearization of the whole history all ops before the
//     cut come first. The history is linearizable exactly when there are
//     states s0 -> s1 -> ... with each segment linearizable from the state
//     its predecessor ended in; carrying the set of all end states of each
//     segment (not one) makes the chained check exact, so no violation can
//     hide across a cut.

// expiredSince is in the error of an acquire the client reported as
// indeterminate after a retry was answered "held" while an earlier
// attempt may have been granted (B1b). The client stopped when B1b was
// fixed (a retry now gets the first attempt's outcome); histories
// recorded before still have it.
const expiredSince = "an earlier attempt may have been granted and has expired since"

// Segment is the verdict on one segment of one name's history.
type Segment struct {
	From, To int64 // call of its first op, largest return
	Ops      int
	Result   porcupine.CheckResult
	States   int // end states carried to the next segment
}

// prepare returns the ops of one name's history that can change state,
// with indeterminate returns bounded by window, sorted by call.
func prepare(h History, window time.Duration) []porcupine.Operation {
	var end int64
	for _, r := range h {
		end = max(end, r.Return, r.Call)
	}
	var ops []porcupine.Operation
	for _, r := range h {
		ret := r.Return
		if r.Op == OpAcquire && r.Outcome == Indeterminate && strings.Contains(r.Err, expiredSince) {
			// The client had a definite "held" answer; an earlier attempt
			// took effect before it or never.
			r.Outcome = Maybe
		}
		if r.Outcome == Indeterminate {
			if r.Op == OpGet || r.Op == OpRenew {
				continue // changes nothing whether or not it happened
			}
			ret = min(r.Call+int64(window), end+1)
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Worker, Input: r, Call: r.Call, Output: r.Outcome, Return: ret})
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// cuts splits ops (sorted by call) at the quiescent points.
func cuts(ops []porcupine.Operation) [][]porcupine.Operation {
	var out [][]porcupine.Operation
	start := 0
	var maxRet int64
	for i, o := range ops {
		if i > start && maxRet < o.Call {
			out = append(out, ops[start:i])
			start = i
		}
		maxRet = max(maxRet, o.Return)
	}
	if start < len(ops) {
		out = append(out, ops[start:])
	}
	return out
}

// searchTimeout ends a search that ran out of time.
type searchTimeout struct{}

// endStates returns every state a complete linearization of ops (sorted
// by call) from one of the states in init can end in; none means ops are
// not linearizable from init. It is the search of Wing and Gong with
// porcupine's memo of (ops done, state), kept exhaustive so that it finds
// every end state.
func (m Model) endStates(init []leaseState, ops []porcupine.Operation, deadline time.Time) (out []leaseState, timedOut bool) {
	n := len(ops)
	done := make([]bool, n)
	// The set of ops done is kept as a 128-bit hash, the XOR of a random
	// value per op (Zobrist hashing). A collision could only prune a
	// branch that was in fact new: the check could then fail a legal
	// history, never pass an illegal one; at 128 bits it does not happen.
	zob := make([][2]uint64, n)
	rnd := rand.New(rand.NewPCG(uint64(n), 0x5e6))
	for i := range zob {
		zob[i] = [2]uint64{rnd.Uint64(), rnd.Uint64()}
	}
	var h [2]uint64
	type key struct {
		done [2]uint64
		s    leaseState
	}
	seen := map[key]bool{}
	ends := map[leaseState]bool{}
	steps := 0
	var dfs func(s leaseState, left, first int)
	dfs = func(s leaseState, left, first int) {
		if left == 0 {
			ends[s] = true
			return
		}
		for done[first] {
			first++
		}
		k := key{h, s}
		if seen[k] {
			return
		}
		seen[k] = true
		if steps++; steps%4096 == 0 && time.Now().After(deadline) {
			panic(searchTimeout{})
		}
		// An op can go next if no op not yet done returned before its
		// call. Ops are sorted by call, so the scan stops at the first op
		// called after the earliest return seen.
		minRet := int64(math.MaxInt64)
		last := first
		for i := first; i < n && ops[i].Call <= minRet; i++ {
			if !done[i] {
				minRet = min(minRet, ops[i].Return)
			}
			last = i
		}
		for i := first; i <= last; i++ {
			if done[i] || ops[i].Call > minRet {
				continue
			}
			done[i] = true
			h[0], h[1] = h[0]^zob[i][0], h[1]^zob[i][1]
			for _, next := range m.step(s, ops[i].Input.(Record)) {
				dfs(next, left-1, first)
			}
			done[i] = false
			h[0], h[1] = h[0]^zob[i][0], h[1]^zob[i][1]
		}
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(searchTimeout); !ok {
				panic(r)
			}
			out, timedOut = nil, true
		}
	}()
	for _, s := range init {
		dfs(s, n, 0)
	}
	return slices.SortedFunc(maps.Keys(ends), compareStates), false
}

func compareStates(a, b leaseState) int {
	sa, sb := fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b)
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	}
	return 0
}

// checkSegments checks one name's history segment by segment, each
// within timeout. On an
// illegal segment it returns porcupine's result for that segment (from
// the states it could start in) for the visualization.
func (m Model) checkSegments(h History, window, timeout time.Duration) (porcupine.CheckResult, []Segment, *visual) {
	states := []leaseState{{}}
	var segs []Segment
	for _, ops := range cuts(prepare(h, window)) {
		seg := Segment{From: ops[0].Call, Ops: len(ops)}
		for _, o := range ops {
			seg.To = max(seg.To, o.Return)
		}
		next, timedOut := m.endStates(states, ops, time.Now().Add(timeout))
		switch {
		case timedOut:
			seg.Result = porcupine.Unknown
			return porcupine.Unknown, append(segs, seg), nil
		case len(next) == 0:
			seg.Result = porcupine.Illegal
			pm := m.porcupineFrom(states)
			_, info := porcupine.CheckOperationsVerbose(pm, ops, 10*time.Second)
			return porcupine.Illegal, append(segs, seg), &visual{model: pm, info: info}
		}
		seg.Result, seg.States = porcupine.Ok, len(next)
		segs = append(segs, seg)
		states = next
	}
	return porcupine.Ok, segs, nil
}

// visual is porcupine's account of an illegal segment and the model (with
// the segment's start states) it was computed with.
type visual struct {
	model porcupine.Model
	info  porcupine.LinearizationInfo
}

// write draws v as HTML to path.
func (v *visual) write(path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("porcupine: %v", r)
		}
	}()
	return porcupine.VisualizePath(v.model, v.info, path)
}

func toIfaces(ss []leaseState) []interface{} {
	out := make([]interface{}, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
