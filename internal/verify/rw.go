package verify

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
)

// The read-write workload: lease workers now and then take a name of
// WorkerConfig.RW shared (a read lock) or exclusive (a write lock), try
// or wait, try a fenced write under it, and release it. Its invariants:
//
//   - rw-exclusion: in every watch stream (the commit order), an
//     exclusive grant is made only while the name has no other grant, and
//     a shared grant only while it has shared grants or none (CheckWatches);
//   - shared-no-write: the fenced store never accepts a write with a
//     shared grant's token (CheckRW).
const (
	InvRWExclusion   = "rw-exclusion"
	InvSharedNoWrite = "shared-no-write"
)

func isRW(op string) bool { return op == OpRWAcquire || op == OpRWPut || op == OpRWRelease }

func allShared(g map[uint64]bool) bool {
	for _, s := range g {
		if !s {
			return false
		}
	}
	return true
}

// showGrants describes the grants of name a stream shows.
func showGrants(name string, g map[uint64]bool) string {
	if len(g) == 0 {
		return "free"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(g)) {
		mode := "exclusive"
		if g[t] {
			mode = "shared"
		}
		parts = append(parts, fmt.Sprintf("%s#%d (%s)", name, t, mode))
	}
	return "held by " + strings.Join(parts, ", ")
}

// RWStats counts the read-write workload.
type RWStats struct {
	Acquires int `json:"acquires"`
	Shared   int `json:"shared"`    // acquires granted shared
	Excl     int `json:"exclusive"` // acquires granted exclusive
	Writes   int `json:"writes"`    // writes tried under a grant
	Refused  int `json:"refused"`   // writes with a shared token, refused
}

// CheckRW checks the read-write workload's records: a write with a shared
// token is never accepted; one with an exclusive token may be (or be
// refused as stale, once the grant has ended).
func CheckRW(h History) ([]Violation, RWStats) {
	var (
		vs []Violation
		st RWStats
	)
	for _, r := range h {
		switch r.Op {
		case OpRWAcquire:
			st.Acquires++
			if r.Outcome == Ok && r.Shared {
				st.Shared++
			} else if r.Outcome == Ok {
				st.Excl++
			}
		case OpRWPut:
			st.Writes++
			if r.Shared && r.Outcome == Failed {
				st.Refused++
			}
			if r.Shared && r.Outcome == Ok && len(vs) < 50 {
				vs = append(vs, Violation{InvSharedNoWrite, fmt.Sprintf("%s wrote %s with the shared token %s#%d at %s", r.Holder, r.Key, r.Name, r.Token, stamp(r.Return))})
			}
		}
	}
	return vs, st
}

// rwCycle takes a name of the read-write workload, shared (two times in
// three) or exclusive, tries a write under it, holds it a little and
// releases it.
func (w *worker) rwCycle(ctx context.Context) {
	name := w.cfg.RW[w.rnd.IntN(len(w.cfg.RW))]
	shared := w.rnd.IntN(3) > 0
	wait := w.rnd.IntN(2) == 0
	r := Record{Op: OpRWAcquire, Name: name, Holder: w.holder, Wait: wait, Shared: shared}
	var opts []client.AcquireOption
	if shared {
		opts = append(opts, client.Shared())
	}
	l, err := w.acquireCall(ctx, &r, opts...)
	if err == nil {
		if l.Shared != shared {
			r.Outcome, r.Err = Failed, fmt.Sprintf("asked shared %v, granted shared %v", shared, l.Shared)
		}
	}
	w.emit(r)
	if err != nil {
		return
	}
	put := Record{Op: OpRWPut, Name: name, Holder: w.holder, Key: KeyOf(name), Value: fmt.Sprintf("w%d-%d", w.cfg.ID, l.Token),
		Token: l.Token, Shared: shared}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	put.Call = now()
	_, err = w.cl.Put(octx, put.Key, []byte(put.Value), name, l.Token)
	put.Return = now()
	cancel()
	outcome(err, &put)
	w.emit(put)
	w.pause(ctx, 50*time.Millisecond, 300*time.Millisecond)
	rel := Record{Op: OpRWRelease, Name: name, Holder: w.holder, Token: l.Token, Shared: shared}
	octx, cancel = context.WithTimeout(ctx, 3*time.Second)
	rel.Call = now()
	err = w.cl.Release(octx, name, l.Token)
	rel.Return = now()
	cancel()
	outcome(err, &rel)
	w.emit(rel)
}
