package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// HistoryResult is porcupine's verdict on one name's history.
type HistoryResult struct {
	Name     string `json:"name"`
	Ops      int    `json:"ops"`
	Segments int    `json:"segments"` // checked one after another, cut at quiescent points
	Result   string `json:"result"`
}

// Report is the outcome of a run.
type Report struct {
	Seed         uint64                    `json:"seed"`
	ScheduleHash string                    `json:"schedule_hash"`
	Duration     time.Duration             `json:"duration"`
	Nodes        int                       `json:"nodes"`
	Workers      int                       `json:"workers"`
	Unsafe       bool                      `json:"unsafe"`
	SkipFsync    bool                      `json:"unsafe_skip_fsync,omitempty"`
	Ops          map[string]map[string]int `json:"ops"` // op -> outcome -> count
	Planned      int                       `json:"faults_planned"`
	Injected     map[string]int            `json:"faults_injected"`
	Skipped      map[string]int            `json:"faults_skipped"`
	Histories    []HistoryResult           `json:"histories"`
	Terms        TermStats                 `json:"terms"`
	// Pauses lists, per worker, when the nemesis stopped its process.
	Pauses map[int][]Interval `json:"pauses,omitempty"`
	// SnapshotInstalls counts snapshot faults after which the restarted
	// follower's log mentions a snapshot.
	SnapshotInstalls int        `json:"snapshot_installs"`
	Watches          WatchStats `json:"watches"`
	// RW counts the read-write workload (rw.go).
	RW RWStats `json:"rw"`
	// Membership is the cluster's size at the start and the end
	// (cluster-size).
	Membership   Membership            `json:"membership"`
	Final        map[string]FinalValue `json:"final"`
	Violations   []Violation           `json:"violations"`
	Strict       bool                  `json:"strict"`
	KnownBugs    []Violation           `json:"known_bugs"` // tolerated observations of known bugs
	Inconclusive bool                  `json:"inconclusive"`
	// Evidence is the directory with the history, the visualizations and
	// the node logs of a run that failed or was inconclusive.
	Evidence string `json:"evidence,omitempty"`
	OK       bool   `json:"ok"`
}

func (r *Report) count(h History) {
	r.Ops = map[string]map[string]int{}
	for _, rec := range h {
		op := rec.Op
		if op == OpAcquire && rec.Wait {
			op = "acquire-wait"
		}
		if r.Ops[op] == nil {
			r.Ops[op] = map[string]int{}
		}
		outcome := rec.Outcome
		if outcome == Held && rec.Delayed {
			outcome = HeldLockDelay
		}
		r.Ops[op][outcome]++
	}
}

// WriteJSON writes r to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Print writes the human summary.
func (r *Report) Print(w io.Writer) {
	mode := ""
	if r.Unsafe {
		mode = " (UNSAFE: writes bypass fencing)"
	}
	if r.SkipFsync {
		mode += " (UNSAFE: tenured skips fsync)"
	}
	fmt.Fprintf(w, "tenure-verify: seed %d, schedule %s, %d nodes, %d workers, %s%s\n\n",
		r.Seed, r.ScheduleHash, r.Nodes, r.Workers, r.Duration.Round(100*time.Millisecond), mode)
	outcomes := []string{Ok, Held, HeldLockDelay, Stale, NotFound, Failed, Indeterminate}
	fmt.Fprintf(w, "%-14s %7s", "operation", "total")
	for _, o := range outcomes {
		if o == HeldLockDelay {
			o = "lock-delay" // held: in a lock-delay
		}
		fmt.Fprintf(w, " %13s", o)
	}
	fmt.Fprintln(w)
	total := 0
	for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
		n := 0
		for _, c := range r.Ops[op] {
			n += c
		}
		total += n
		fmt.Fprintf(w, "%-14s %7d", op, n)
		for _, o := range outcomes {
			fmt.Fprintf(w, " %13d", r.Ops[op][o])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-14s %7d\n\n", "all", total)

	fmt.Fprintf(w, "faults (%d planned):", r.Planned)
	for _, k := range KnownFaults {
		if r.Injected[k] > 0 || r.Skipped[k] > 0 {
			fmt.Fprintf(w, " %s %d", k, r.Injected[k])
			if r.Skipped[k] > 0 {
				fmt.Fprintf(w, " (+%d skipped)", r.Skipped[k])
			}
			fmt.Fprint(w, ",")
		}
	}
	fmt.Fprintln(w)
	r.printPowerLoss(w)
	if r.Injected[FaultSnapshot] > 0 {
		fmt.Fprintf(w, "snapshot installs seen after a snapshot fault: %d of %d\n", r.SnapshotInstalls, r.Injected[FaultSnapshot])
	}
	var hs []string
	for _, h := range r.Histories {
		hs = append(hs, fmt.Sprintf("%s %d ops in %d segments %s", h.Name, h.Ops, h.Segments, h.Result))
	}
	fmt.Fprintf(w, "histories checked (linearizable): %s\n", strings.Join(hs, "; "))
	var fs []string
	for _, k := range slices.Sorted(maps.Keys(r.Final)) {
		f := r.Final[k]
		if f.Found {
			fs = append(fs, fmt.Sprintf("%s=%q@%d", k, f.Value, f.Token))
		} else {
			fs = append(fs, k+" unset")
		}
	}
	if r.Final == nil {
		fs = []string{"not read (durability not checked)"}
	}
	fmt.Fprintf(w, "final state: %s\n", strings.Join(fs, " "))
	fmt.Fprintf(w, "invariants: tokens-grow, no-stale-write, acked-writes-durable, no-overlapping-grants, lock-delay-respected\n")
	if m := r.Membership; len(m.Start) > 0 {
		fmt.Fprintf(w, "cluster size (%s): %d voters at the start, %d at the end (%s), waited %s",
			InvClusterSize, len(m.Start), len(m.End), strings.Join(m.End, ", "), m.Waited.Round(100*time.Millisecond))
		if len(m.Unrestored) == 0 {
			fmt.Fprintf(w, "; every member fault restored it\n")
		} else {
			fmt.Fprintf(w, "; %d member faults did not restore it:\n", len(m.Unrestored))
			for _, u := range m.Unrestored {
				fmt.Fprintf(w, "  %s\n", u)
			}
		}
	}
	t := r.Terms
	fmt.Fprintf(w, "election terms (%s, %s, %s): %d terms (%d ended by %d revocations, %d handed off), %d writes (%d ok), %d late writes, %d overlaps excused by a pause\n",
		InvTermTokens, InvWriteInTerm, InvTermsDisjoint, t.Terms, t.Revoked, t.Revokes, t.HandedOff, t.Writes, t.WritesOK, t.LateWrites, t.Excused)
	ws := r.Watches
	fmt.Fprintf(w, "watches (%s): %d watchers, %d streams (%d resets), %d events at %d indexes\n",
		InvWatch, ws.Watchers, ws.Streams, ws.Resets, ws.Events, ws.Indexes)
	rw := r.RW
	fmt.Fprintf(w, "read-write locks (%s, %s): %d acquires (%d granted shared, %d exclusive), %d writes (%d with a shared token, refused)\n",
		InvRWExclusion, InvSharedNoWrite, rw.Acquires, rw.Shared, rw.Excl, rw.Writes, rw.Refused)
	if r.Strict {
		fmt.Fprintf(w, "known bugs: none tolerated\n\n")
	} else {
		fmt.Fprintf(w, "known bugs: B1b/B1c (a retried acquire whose first attempt may have granted, answered held or granted again) modelled for a history recorded before their fix (--strict=false); needed %d times\n", len(r.KnownBugs))
		for i, v := range r.KnownBugs {
			if i == 3 {
				fmt.Fprintf(w, "  ... %d more (see summary.json)\n", len(r.KnownBugs)-i)
				break
			}
			fmt.Fprintf(w, "  B1b/B1c: %s\n", v.Detail)
		}
		fmt.Fprintln(w)
	}
	switch {
	case !r.OK:
		fmt.Fprintf(w, "VERDICT: FAIL, %d violations\n", len(r.Violations))
		for i, v := range r.Violations {
			if i == 20 {
				fmt.Fprintf(w, "  ... %d more (see summary.json)\n", len(r.Violations)-i)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
	case r.Inconclusive:
		fmt.Fprintln(w, "VERDICT: INCONCLUSIVE (the linearizability search timed out on a history; no violation found)")
	default:
		fmt.Fprintln(w, "VERDICT: OK, no violations")
	}
	if r.Evidence != "" {
		fmt.Fprintf(w, "evidence (history.jsonl, history-NAME.html, n*.log) kept in %s\n", r.Evidence)
	}
}
