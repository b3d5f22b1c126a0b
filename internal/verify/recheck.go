package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/anishathalye/porcupine"
)

// Recheck runs the checks again on the evidence a run left in dir
// (history.jsonl, watch.jsonl and summary.json): the linearizability
// check, the plain invariants (durability with the final state the run
// read), the watch check, and the election checks when the summary lists
// the client pauses (else their verdict is the run's). Faults are not
// replayed; use --seed for that.
func Recheck(dir string, cfg Config) (*Report, error) {
	cfg.defaults()
	f, err := os.Open(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	all, err := ReadJSONL(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	var old Report
	if b, err := os.ReadFile(filepath.Join(dir, "summary.json")); err == nil {
		json.Unmarshal(b, &old)
	}
	rep := &Report{Seed: old.Seed, ScheduleHash: old.ScheduleHash, Duration: old.Duration, Nodes: old.Nodes, Workers: old.Workers,
		Unsafe: old.Unsafe, SkipFsync: old.SkipFsync, Strict: !cfg.Legacy, Planned: old.Planned, Injected: old.Injected, Skipped: old.Skipped,
		Final: old.Final, SnapshotInstalls: old.SnapshotInstalls, Pauses: old.Pauses, Membership: old.Membership}
	rep.count(all)
	h, terms := all.Split()
	m := Model{MinExpiry: cfg.MinExpiry(), DelayScale: cfg.DelayScale()}
	checked := h
	rep.Violations = CheckInvariants(h, old.Final, m)
	if cfg.Legacy {
		checked = append(append(History(nil), h...), RetriedAcquires(h)...)
		rep.Violations = CheckInvariants(checked, old.Final, m)
	}
	// What cannot be checked again is taken from the run: the faults'
	// own findings, and the election checks when the summary predates
	// the pauses they need. The cluster-size check is made again on the
	// membership the run saw.
	for _, v := range old.Violations {
		switch v.Invariant {
		case InvDamagedRefused:
			rep.Violations = append(rep.Violations, v)
		case InvTermTokens, InvWriteInTerm, InvTermsDisjoint:
			if old.Pauses == nil {
				rep.Violations = append(rep.Violations, v)
			}
		}
	}
	rep.Violations = append(rep.Violations, old.Membership.Check()...)
	rep.Terms = old.Terms
	if old.Pauses != nil {
		tv, tst := CheckTerms(terms, old.Pauses)
		rep.Violations = append(rep.Violations, tv...)
		rep.Terms = tst
	}
	if wf, err := os.Open(filepath.Join(dir, "watch.jsonl")); err == nil {
		var recs []WatchRecord
		sc := bufio.NewScanner(wf)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r WatchRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				recs = append(recs, r)
			}
		}
		wf.Close()
		wv, wst := CheckWatches(recs, old.Watches.Watchers, all)
		rep.Violations = append(rep.Violations, wv...)
		rep.Watches = wst
	}
	rv, rst := CheckRW(all)
	rep.Violations = append(rep.Violations, rv...)
	rep.RW = rst
	for _, r := range CheckLinearizable(m, checked, cfg.EffectWindow, cfg.CheckTimeout) {
		rep.Histories = append(rep.Histories, HistoryResult{Name: r.Name, Ops: r.Ops, Segments: len(r.Segments), Result: string(r.Result)})
		switch r.Result {
		case porcupine.Unknown:
			rep.Inconclusive = true
		case porcupine.Illegal:
			rep.Violations = append(rep.Violations, Violation{InvLinearizable, fmt.Sprintf("the history of %q (%d ops) is not linearizable (segment %d)", r.Name, r.Ops, len(r.Segments))})
		}
	}
	rep.OK = len(rep.Violations) == 0
	return rep, nil
}
