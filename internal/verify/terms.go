package verify

import (
	"fmt"
	"sort"
)

// Invariants of election workers (guarantees 5 and 6, client side).
const (
	InvTermTokens    = "term-tokens-grow"
	InvWriteInTerm   = "no-write-after-term"
	InvTermsDisjoint = "live-terms-disjoint"
)

// Interval is a span of wall-clock Unix nanoseconds, From to To.
type Interval struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// TermStats counts what CheckTerms saw.
type TermStats struct {
	Terms      int `json:"terms"`
	Writes     int `json:"writes"`
	WritesOK   int `json:"writes_ok"`
	LateWrites int `json:"late_writes"`      // tried after the term's context ended; must be refused without a request
	Excused    int `json:"overlaps_excused"` // overlaps explained by a pause of the earlier holder's process
	// Revoked counts the terms an operator's revocation ended (their
	// sessions have a lock-delay of the TTL, so the next term must still
	// begin after they ended), and Revokes the revocations of election
	// names that ended a grant.
	Revoked int `json:"revoked"`
	Revokes int `json:"revokes"`
	// HandedOff counts the terms handed off to the next in line (the
	// next term begins at once, after this one's context ended).
	HandedOff int `json:"handed_off"`
}

type termKey struct {
	worker, term int
}

// CheckTerms checks the records of election workers:
//
//   - term-tokens-grow: a term that started after another term of the
//     same name had ended has a strictly larger token (guarantee 6: a
//     campaign after a loss never resumes the old grant);
//   - no-write-after-term: a write tried after its term's context ended
//     was refused by the library without a request;
//   - live-terms-disjoint: two holders' terms of one name do not overlap
//     (guarantee 5: the library ends a holder's context before the server
//     can grant the lease again), unless the earlier holder's process was
//     paused during its term; then fencing must have refused every write
//     it sent after the later term began.
//
// pauses lists, per worker, when its process was stopped (SIGSTOP).
func CheckTerms(h History, pauses map[int][]Interval) ([]Violation, TermStats) {
	var vs []Violation
	var st TermStats
	terms := map[termKey]Record{}
	byName := map[string][]Record{}
	var puts []Record
	for _, r := range h {
		switch r.Op {
		case OpTerm:
			terms[termKey{r.Worker, r.Term}] = r
			byName[r.Name] = append(byName[r.Name], r)
			st.Terms++
			if r.Revoked {
				st.Revoked++
			}
			if r.HandedOff {
				st.HandedOff++
			}
		case OpTermRevoke:
			if r.Outcome == Ok {
				st.Revokes++
			}
		case OpTermPut:
			puts = append(puts, r)
			st.Writes++
			if r.Outcome == Ok {
				st.WritesOK++
			}
			if r.Late {
				st.LateWrites++
			}
		}
	}
	for _, p := range puts {
		t, ok := terms[termKey{p.Worker, p.Term}]
		if !ok {
			continue // the worker was stopped before it recorded the term
		}
		if (p.Late || p.Call > t.Return) && p.Outcome != Refused {
			vs = append(vs, Violation{InvWriteInTerm, fmt.Sprintf("%s's write %q with token %d was sent at %s, after its term's context ended at %s (outcome %s)",
				p.Holder, p.Value, p.Token, stamp(p.Call), stamp(t.Return), p.Outcome)})
		}
	}
	paused := func(worker int, from, to int64) bool {
		for _, iv := range pauses[worker] {
			if iv.From < to && iv.To > from {
				return true
			}
		}
		return false
	}
	for name, ts := range byName {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Call < ts[j].Call })
		for j, b := range ts {
			for _, a := range ts[:j] {
				if a.Return < b.Call && b.OutToken <= a.OutToken {
					what := "a smaller"
					if b.OutToken == a.OutToken {
						what = "the same"
					}
					vs = append(vs, Violation{InvTermTokens, fmt.Sprintf("%s's term of %q from %s has %s token (%d) as %s's term that ended at %s (token %d)",
						b.Holder, name, stamp(b.Call), what, b.OutToken, a.Holder, stamp(a.Return), a.OutToken)})
				}
				if a.Holder == b.Holder || b.Call >= a.Return {
					continue
				}
				if !paused(a.Worker, a.Call, a.Return) {
					vs = append(vs, Violation{InvTermsDisjoint, fmt.Sprintf("%s led %q (token %d) from %s while %s's term (token %d) was live until %s",
						b.Holder, name, b.OutToken, stamp(b.Call), a.Holder, a.OutToken, stamp(a.Return))})
					continue
				}
				st.Excused++
				for _, p := range puts {
					if p.Worker == a.Worker && p.Term == a.Term && p.Outcome == Ok && p.Call >= b.Call {
						vs = append(vs, Violation{InvTermsDisjoint, fmt.Sprintf("paused holder %s's write %q (token %d) sent at %s was accepted after %s began leading %q at %s (token %d)",
							a.Holder, p.Value, p.Token, stamp(p.Call), b.Holder, name, stamp(b.Call), b.OutToken)})
					}
				}
			}
		}
	}
	return vs, st
}
