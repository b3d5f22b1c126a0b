package verify

import (
	"testing"
)

func term(worker, n int, holder string, token uint64, start, end int64) Record {
	return Record{Worker: worker, Op: OpTerm, Name: "e", Holder: holder, Term: n, OutToken: token, Call: start * ms, Return: end * ms, Outcome: Ok}
}

func termPut(worker, n int, holder string, token uint64, call int64, outcome string, late bool) Record {
	return Record{Worker: worker, Op: OpTermPut, Name: "e", Holder: holder, Term: n, Key: KeyOf("e"), Value: "v", Token: token,
		Call: call * ms, Return: call*ms + 5*ms, Outcome: outcome, Late: late}
}

func handedOff(r Record) Record {
	r.HandedOff = true
	return r
}

// TestCheckTerms feeds legal and illegal histories of election workers:
// each illegal one is a negative control of one check.
func TestCheckTerms(t *testing.T) {
	tests := []struct {
		name   string
		h      History
		pauses map[int][]Interval
		want   string // violated invariant, "" for legal
	}{
		{"terms one after another", History{
			term(0, 1, "a", 1, 0, 1000), termPut(0, 1, "a", 1, 500, Ok, false),
			termPut(0, 1, "a", 1, 1010, Refused, true),
			term(1, 1, "b", 2, 3000, 4000),
		}, nil, ""},
		{"re-campaign after a loss reuses the token", History{
			term(0, 1, "a", 3, 0, 1000),
			term(0, 2, "a", 3, 1200, 2000),
		}, nil, InvTermTokens},
		{"later term with a smaller token", History{
			term(0, 1, "a", 5, 0, 1000),
			term(1, 1, "b", 4, 1200, 2000),
		}, nil, InvTermTokens},
		{"late write sent", History{
			term(0, 1, "a", 1, 0, 1000),
			termPut(0, 1, "a", 1, 1010, Stale, true),
		}, nil, InvWriteInTerm},
		{"write after the end", History{
			term(0, 1, "a", 1, 0, 1000),
			termPut(0, 1, "a", 1, 1100, Ok, false),
		}, nil, InvWriteInTerm},
		{"handoff: the next term begins as the handed-off one ends", History{
			handedOff(term(0, 1, "a", 1, 0, 1000)),
			termPut(0, 1, "a", 1, 1001, Refused, true),
			term(1, 1, "b", 2, 1002, 4000),
		}, nil, ""},
		{"handoff: the next term begins before the handed-off one's context ended", History{
			handedOff(term(0, 1, "a", 1, 0, 1003)),
			term(1, 1, "b", 2, 1002, 4000),
		}, nil, InvTermsDisjoint},
		{"handoff: the next term reuses the token", History{
			handedOff(term(0, 1, "a", 2, 0, 1000)),
			term(1, 1, "b", 2, 1002, 4000),
		}, nil, InvTermTokens},
		{"overlapping terms", History{
			term(0, 1, "a", 1, 0, 2500),
			term(1, 1, "b", 2, 2000, 4000),
		}, nil, InvTermsDisjoint},
		{"overlap of a paused holder, writes fenced", History{
			term(0, 1, "a", 1, 0, 5000),
			termPut(0, 1, "a", 1, 4900, Stale, false),
			term(1, 1, "b", 2, 2000, 4000),
		}, map[int][]Interval{0: {{500 * ms, 4800 * ms}}}, ""},
		{"overlap of a paused holder, write accepted", History{
			term(0, 1, "a", 1, 0, 5000),
			termPut(0, 1, "a", 1, 4900, Ok, false),
			term(1, 1, "b", 2, 2000, 4000),
		}, map[int][]Interval{0: {{500 * ms, 4800 * ms}}}, InvTermsDisjoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, _ := CheckTerms(tt.h, tt.pauses)
			if tt.want == "" {
				if len(vs) > 0 {
					t.Fatalf("legal history reported: %v", vs)
				}
				return
			}
			for _, v := range vs {
				if v.Invariant == tt.want {
					return
				}
			}
			t.Fatalf("want a %s violation, got %v", tt.want, vs)
		})
	}
}
