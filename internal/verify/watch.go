package verify

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenure-io/tenure/client"
)

// InvWatch is the invariant of watch streams.
const InvWatch = "watch-complete"

// WatchRecord is one event a watcher received. Seg numbers the watcher's
// streams: a new one starts with every (re)opened watch and every reset.
type WatchRecord struct {
	Node   int    `json:"node"`
	Seg    int    `json:"seg"`
	Type   string `json:"type"`
	Name   string `json:"name,omitempty"`
	Holder string `json:"holder,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	Index  uint64 `json:"index,omitempty"`
	At     int64  `json:"at"`
	// Shared marks the event of a shared grant.
	Shared bool `json:"shared,omitempty"`
}

// WatchStats counts what CheckWatches saw.
type WatchStats struct {
	Watchers int `json:"watchers"`
	Streams  int `json:"streams"` // watches opened, resets included
	Resets   int `json:"resets"`
	Events   int `json:"events"`  // grants, releases and expiries received
	Indexes  int `json:"indexes"` // distinct raft entries with events
}

// Watchers watch every lease on each node, each through a client that
// talks to that node only, for the whole run.
type Watchers struct {
	mu   sync.Mutex
	recs []WatchRecord
	wg   sync.WaitGroup
	n    int
}

// StartWatchers starts one watcher per endpoint until ctx ends.
func StartWatchers(ctx context.Context, endpoints []string) *Watchers {
	w := &Watchers{n: len(endpoints)}
	for i, ep := range endpoints {
		w.wg.Go(func() { w.watch(ctx, i, ep) })
	}
	return w
}

func (w *Watchers) add(r WatchRecord) {
	w.mu.Lock()
	w.recs = append(w.recs, r)
	w.mu.Unlock()
}

func (w *Watchers) watch(ctx context.Context, node int, ep string) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{ep}
	cfg.RequestTimeout = time.Second
	cfg.DialTimeout = 500 * time.Millisecond
	cl, err := newClient(cfg)
	if err != nil {
		return
	}
	defer cl.Close()
	seg := 0
	for ctx.Err() == nil {
		ch, err := cl.Watch(ctx, "")
		if err != nil {
			// The node is down or cut off: try again until the run ends.
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		seg++
		for ev := range ch {
			if ev.Type == client.EventReset {
				seg++
			}
			w.add(WatchRecord{Node: node, Seg: seg, Type: ev.Type.String(), Name: ev.Lease.Name, Holder: ev.Lease.Holder,
				Token: ev.Lease.Token, Index: ev.Index, At: now(), Shared: ev.Lease.Shared})
			if ev.Type == client.EventError {
				break
			}
		}
	}
}

// Stop waits for the watchers (their ctx must have ended) and returns
// what they received.
func (w *Watchers) Stop() ([]WatchRecord, int) {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recs, w.n
}

func isChange(t string) bool {
	return t == client.EventGranted.String() || t == client.EventReleased.String() || t == client.EventExpired.String() ||
		t == client.EventRevoked.String()
}

func (r WatchRecord) key() string { return fmt.Sprintf("%s %s#%d", r.Type, r.Name, r.Token) }

// CheckWatches checks that every watcher's stream follows the commit
// order: the union of every stream's grants, releases and expiries, by
// raft index, is the reference. Every grant a client was told of (the
// first answer with its token: an acquire, an election term) is in the
// reference if some stream was open from 15s before its call (an earlier
// attempt may have made it) to after its return. Within one stream
// (between resets):
//
//   - every index that carries events carries the same events as in the
//     reference, and indexes never go backwards;
//   - no index of the reference between the stream's first and last is
//     missing (a skipped event, as when a follower installs a snapshot
//     without resetting its watches);
//   - per name, the stream's picture (from its current-state events on)
//     stays consistent: a grant only of a free name with a larger token
//     than any before, a release or expiry only of the current grant.
func CheckWatches(recs []WatchRecord, watchers int, h History) ([]Violation, WatchStats) {
	st := WatchStats{Watchers: watchers}
	type stream struct {
		node, seg int
		recs      []WatchRecord
	}
	streams := map[[2]int]*stream{}
	ref := map[uint64][]string{}
	for _, r := range recs {
		k := [2]int{r.Node, r.Seg}
		if streams[k] == nil {
			streams[k] = &stream{node: r.Node, seg: r.Seg}
			st.Streams++
		}
		streams[k].recs = append(streams[k].recs, r)
		if r.Type == client.EventReset.String() {
			st.Resets++
		}
		if isChange(r.Type) {
			st.Events++
		}
	}
	// The reference: per index, the events of the first stream that has it.
	for _, k := range slices.SortedFunc(maps.Keys(streams), func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	}) {
		byIdx := map[uint64][]string{}
		for _, r := range streams[k].recs {
			if isChange(r.Type) {
				byIdx[r.Index] = append(byIdx[r.Index], r.key())
			}
		}
		for idx, evs := range byIdx {
			if _, ok := ref[idx]; !ok {
				ref[idx] = evs
			}
		}
	}
	st.Indexes = len(ref)
	refIdx := slices.Sorted(maps.Keys(ref))
	var vs []Violation
	granted := map[string]bool{}
	for _, evs := range ref {
		for _, e := range evs {
			granted[e] = true
		}
	}
	// The first sighting of each token: the grant happened before its
	// return, and after its call or, if an earlier attempt of the holder
	// made it, at most grantSlack before.
	const grantSlack = int64(15 * time.Second)
	firstSeen := map[string]Record{}
	for _, r := range h {
		if r.Outcome != Ok || (r.Op != OpAcquire && r.Op != OpTerm && r.Op != OpRWAcquire) || r.OutToken == 0 {
			continue
		}
		k := fmt.Sprintf("%s %s#%d", client.EventGranted, r.Name, r.OutToken)
		if f, ok := firstSeen[k]; !ok || r.Return < f.Return {
			firstSeen[k] = r
		}
	}
	for _, k := range slices.Sorted(maps.Keys(firstSeen)) {
		r := firstSeen[k]
		if granted[k] {
			continue
		}
		tok := r.OutToken
		for _, s := range streams {
			first, last := s.recs[0], s.recs[len(s.recs)-1]
			if first.At < r.Call-grantSlack && last.At > r.Return && len(vs) < 50 {
				vs = append(vs, Violation{InvWatch, fmt.Sprintf("%s was granted %s#%d at %s, but no watch stream showed the grant although the one on n%d was open from %s to %s",
					r.Holder, r.Name, tok, stamp(r.Return), s.node+1, stamp(first.At), stamp(last.At))})
				break
			}
		}
	}
	report := func(s *stream, format string, args ...any) {
		if len(vs) < 50 {
			vs = append(vs, Violation{InvWatch, fmt.Sprintf("watcher on n%d, stream %d: ", s.node+1, s.seg) + fmt.Sprintf(format, args...)})
		}
	}
	reportRW := func(s *stream, format string, args ...any) {
		if len(vs) < 50 {
			vs = append(vs, Violation{InvRWExclusion, fmt.Sprintf("watcher on n%d, stream %d: ", s.node+1, s.seg) + fmt.Sprintf(format, args...)})
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(streams), func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	}) {
		s := streams[k]
		byIdx := map[uint64][]string{}
		var order []uint64
		// held: name -> the grants the stream shows (token -> shared);
		// one exclusive grant, or shared grants only (rw-exclusion).
		held := map[string]map[uint64]bool{}
		last := map[string]uint64{} // name -> highest token the stream showed
		hold := func(r WatchRecord) {
			if held[r.Name] == nil {
				held[r.Name] = map[uint64]bool{}
			}
			held[r.Name][r.Token] = r.Shared
			last[r.Name] = max(last[r.Name], r.Token)
		}
		for _, r := range s.recs {
			switch {
			case r.Type == client.EventCurrent.String():
				if g := held[r.Name]; len(g) > 0 && !(r.Shared && allShared(g)) {
					reportRW(s, "its current state shows %s (shared %v) with %s", r.key(), r.Shared, showGrants(r.Name, g))
				}
				hold(r)
			case isChange(r.Type):
				if n := len(order); n > 0 && r.Index < order[n-1] {
					report(s, "%s at index %d after index %d", r.key(), r.Index, order[n-1])
				}
				if len(byIdx[r.Index]) == 0 {
					order = append(order, r.Index)
				}
				byIdx[r.Index] = append(byIdx[r.Index], r.key())
				g := held[r.Name]
				switch r.Type {
				case client.EventGranted.String():
					switch {
					case len(g) > 0 && !r.Shared:
						reportRW(s, "exclusive %s at index %d while the stream shows %s: an exclusive grant overlaps another grant (or an end was skipped)", r.key(), r.Index, showGrants(r.Name, g))
					case len(g) > 0 && !allShared(g):
						reportRW(s, "shared %s at index %d while the stream shows %s: a shared grant overlaps an exclusive one (or its end was skipped)", r.key(), r.Index, showGrants(r.Name, g))
					case r.Token <= last[r.Name]:
						report(s, "%s at index %d after token %d", r.key(), r.Index, last[r.Name])
					}
					hold(r)
				default:
					if _, ok := g[r.Token]; !ok {
						report(s, "%s at index %d, but the stream shows %s as %s: its grant was skipped", r.key(), r.Index, r.Name, showGrants(r.Name, g))
					}
					delete(g, r.Token)
				}
			}
		}
		for idx, evs := range byIdx {
			a, b := slices.Clone(evs), slices.Clone(ref[idx])
			sort.Strings(a)
			sort.Strings(b)
			if !slices.Equal(a, b) {
				report(s, "index %d carries [%s], another stream [%s]", idx, strings.Join(a, ", "), strings.Join(b, ", "))
			}
		}
		if len(order) == 0 {
			continue
		}
		first, lastIdx := order[0], order[len(order)-1]
		lo := sort.Search(len(refIdx), func(i int) bool { return refIdx[i] > first })
		for _, idx := range refIdx[lo:] {
			if idx >= lastIdx {
				break
			}
			if _, ok := byIdx[idx]; !ok {
				report(s, "skipped index %d ([%s]) between indexes %d and %d without a reset", idx, strings.Join(ref[idx], ", "), first, lastIdx)
			}
		}
	}
	return vs, st
}
