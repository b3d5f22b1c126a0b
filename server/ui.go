package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/ui"
)

// The dashboard: static assets at /ui (embedded by package ui) and its data
// under /ui/api, all read-only. Every data handler is mounted through
// uiHandler, the one place where an access check goes.

// uiNode is what the dashboard needs of a node beyond Node. A node without
// it gets the page but its data handlers answer 501.
type uiNode interface {
	Activity(seq uint64, limit int) node.ActivityPage
	History(name string) node.History
	Histories(prefix string, max int) []node.History
	Renewals() []node.RenewalCount
	RenewedSince(seq uint64, prefix string) ([]node.Renewal, uint64, bool)
	LiveLeases(prefix string) ([]lease.Lease, time.Duration)
	Waiters(prefix string) map[string][]string
	SubscribeActivity() (<-chan struct{}, func())
	AppliedOps() (uint64, time.Duration)
	ApplyLatency(*dto.Metric) error
}

var _ uiNode = (*node.Node)(nil)

// The permissions of the dashboard's data handlers: PermRead to read the
// leases and events under the request's prefix (or of its name), as a
// Watch of that prefix needs; PermStatus to see the cluster's shape and
// rates, as ClusterService.Status needs (any authenticated principal).
const (
	PermRead   = "read"
	PermStatus = "status"
)

// uiHandler wraps every /ui/api handler: the one place where the
// dashboard's access is checked. perm names what the handler needs; the
// caller's credentials (Authorization: Bearer, or a client certificate)
// are judged by the server's Auth like any API request's, and a refusal
// answers 401 or 403 with the reason. The handler answers 501 when the
// node cannot serve the dashboard.
func (s *Server) uiHandler(perm string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.ui == nil {
			http.Error(w, "server: this node does not serve the dashboard's data", http.StatusNotImplemented)
			return
		}
		if err := s.uiAuthorize(r, perm); err != nil {
			status := http.StatusForbidden
			if connect.CodeOf(err) == connect.CodeUnauthenticated {
				status = http.StatusUnauthorized
			}
			msg := err.Error()
			if ce, ok := errors.AsType[*connect.Error](err); ok {
				msg = ce.Message()
			}
			http.Error(w, msg, status)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// uiAuthorize checks perm for r, as the API call that reads the same
// would be checked.
func (s *Server) uiAuthorize(r *http.Request, perm string) error {
	switch perm {
	case PermRead:
		q := r.URL.Query()
		prefix := q.Get("prefix")
		if q.Has("name") {
			prefix = q.Get("name")
		}
		return s.auth.authorize(r.Context(), tenurev1connect.LeaseServiceWatchProcedure, &tenurev1.WatchRequest{Prefix: prefix})
	case PermStatus:
		return s.auth.authorize(r.Context(), tenurev1connect.ClusterServiceStatusProcedure, &tenurev1.StatusRequest{})
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("server: unknown dashboard permission %q", perm))
}

func (s *Server) mountUI(mux *http.ServeMux) {
	ops := func() uint64 { return 0 }
	var latency func(*dto.Metric) error
	if n, ok := s.node.(uiNode); ok {
		s.ui = n
		ops = func() uint64 { n, _ := s.ui.AppliedOps(); return n }
		latency = n.ApplyLatency
	}
	s.sampler = newSampler(ops, s.metrics.served.Load, latency) // started by New
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("GET /ui/", http.StripPrefix("/ui", ui.Handler()))
	mux.Handle("GET /ui/api/state", s.uiHandler(PermRead, http.HandlerFunc(s.uiState)))
	mux.Handle("GET /ui/api/stream", s.uiHandler(PermRead, http.HandlerFunc(s.uiStream)))
	mux.Handle("GET /ui/api/history", s.uiHandler(PermRead, http.HandlerFunc(s.uiHistory)))
	mux.Handle("GET /ui/api/cluster", s.uiHandler(PermStatus, http.HandlerFunc(s.uiCluster)))
	mux.Handle("GET /ui/api/metrics", s.uiHandler(PermStatus, http.HandlerFunc(s.uiMetrics)))
}

// ms is a duration in milliseconds, as the page counts time.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// wallMS is a wall-clock time in Unix milliseconds, as the page shows
// times to people; 0 if unknown.
func wallMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

type uiLease struct {
	Name      string   `json:"name"`
	Holder    string   `json:"holder"`
	Token     uint64   `json:"token"`
	TTL       float64  `json:"ttl"`
	GrantedAt float64  `json:"granted_at"`
	ExpiresAt float64  `json:"expires_at"`
	Limit     int      `json:"limit,omitempty"`
	Waiters   []string `json:"waiters,omitempty"`
	Shared    bool     `json:"shared,omitempty"`
}

func toUILease(l lease.Lease, leader bool) uiLease {
	return uiLease{Name: l.Name, Holder: l.Holder, Token: l.Token, TTL: ms(l.TTL),
		GrantedAt: ms(l.GrantedAt), ExpiresAt: ms(shownExpiry(l.Promise(), l.ExpiresAt, leader)), Limit: l.Limit, Shared: l.Shared}
}

// shownExpiry is the expiry the dashboard shows of a grant promised to
// its holder until promised and kept by the cluster until kept: the
// promise on the leader, which knows the renewals it answered from
// memory (docs/time.md), and on a follower, which knows only those in
// the log, the time the cluster keeps the grant until, so that a grant
// renewed from memory never shows as run out there.
func shownExpiry(promised, kept time.Duration, leader bool) time.Duration {
	if leader {
		return promised
	}
	return kept
}

type uiActivity struct {
	Seq    uint64  `json:"seq"`
	Index  uint64  `json:"index"`
	At     float64 `json:"at"`
	Wall   int64   `json:"wall,omitempty"`
	Kind   string  `json:"kind"`
	Name   string  `json:"name,omitempty"`
	Holder string  `json:"holder,omitempty"`
	Token  uint64  `json:"token,omitempty"`
	Key    string  `json:"key,omitempty"`
	Delete bool    `json:"delete,omitempty"`
	Error  string  `json:"error,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

func toUIActivities(acts []node.Activity) []uiActivity {
	out := make([]uiActivity, len(acts))
	for i, a := range acts {
		out[i] = uiActivity{Seq: a.Seq, Index: a.Index, At: ms(a.At), Wall: wallMS(a.Wall), Kind: a.Kind.String(), Name: a.Name,
			Holder: a.Holder, Token: a.Token, Key: a.Key, Delete: a.Delete, Reason: a.Reason}
		if a.Err != nil {
			out[i].Error = a.Err.Error()
		}
	}
	return out
}

type uiRenewals struct {
	Second float64 `json:"second"`
	Count  uint64  `json:"count"`
}

func toUIRenewals(rs []node.RenewalCount) []uiRenewals {
	out := make([]uiRenewals, len(rs))
	for i, r := range rs {
		out[i] = uiRenewals{Second: ms(r.Second), Count: r.Count}
	}
	return out
}

// uiSnapshot is the state the page starts from: the live leases with their
// waiters, the recent activity and the renewal counts. Now is the cluster
// time, Wall this node's wall clock (Unix milliseconds) when it was taken.
type uiSnapshot struct {
	Node       string        `json:"node"`
	Now        float64       `json:"now"`
	Wall       int64         `json:"wall"`
	Prefix     string        `json:"prefix"`
	Leases     []uiLease     `json:"leases"`
	Activities []uiActivity  `json:"activities"`
	Last       uint64        `json:"last"`
	Renewals   []uiRenewals  `json:"renewals"`
	Reason     string        `json:"reason,omitempty"`
	Status     uiStatusShort `json:"status"`
}

type uiStatusShort struct {
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     uint64 `json:"term"`
}

// recentActivities is how many activities a snapshot carries.
const recentActivities = 500

func (s *Server) snapshot(w *node.Watch, prefix string) uiSnapshot {
	waiters := s.ui.Waiters(prefix)
	page := s.ui.Activity(0, recentActivities)
	st := s.node.Status()
	snap := uiSnapshot{
		Node: s.node.ID(), Now: ms(w.Now), Wall: time.Now().UnixMilli(), Prefix: prefix,
		Leases:     make([]uiLease, 0, len(w.Current)),
		Activities: toUIActivities(page.Activities),
		Last:       page.Last,
		Renewals:   toUIRenewals(s.ui.Renewals()),
		Status:     uiStatusShort{State: st.State, LeaderID: st.LeaderID, Term: st.Term},
	}
	for _, l := range w.Current {
		ul := toUILease(l, s.node.IsLeader())
		ul.Waiters = waiters[l.Name]
		snap.Leases = append(snap.Leases, ul)
	}
	return snap
}

// uiState answers the current state once (the stream starts with the same).
func (s *Server) uiState(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	wt, err := s.node.Watch(prefix)
	if err != nil {
		http.Error(w, "server: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer wt.Cancel()
	writeJSON(w, s.snapshot(wt, prefix))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return // the client went away
	}
}

type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func (e sse) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	e.f.Flush()
	return nil
}

type uiLeaseEvent struct {
	Type  string  `json:"type"`
	Index uint64  `json:"index"`
	At    float64 `json:"at"`
	Lease uiLease `json:"lease"`
}

type uiTick struct {
	Now      float64             `json:"now"`
	Wall     int64               `json:"wall"`
	Renewals []uiRenewals        `json:"renewals"`
	Renewed  []uiExpiry          `json:"renewed,omitempty"`
	Waiters  map[string][]string `json:"waiters"`
	Status   uiStatusShort       `json:"status"`
}

// uiExpiry is a grant's expiry after it was renewed.
type uiExpiry struct {
	Name      string  `json:"name"`
	Token     uint64  `json:"token"`
	ExpiresAt float64 `json:"expires_at"`
}

// renewedSince returns the new expiries of the grants under prefix renewed
// after seq (the last of each), and the seq to ask after next time. If the
// node no longer has all of those renewals, it returns every live grant's
// expiry instead.
func (s *Server) renewedSince(seq uint64, prefix string) ([]uiExpiry, uint64) {
	rs, next, complete := s.ui.RenewedSince(seq, prefix)
	leader := s.node.IsLeader()
	var out []uiExpiry
	if !complete {
		ls, _ := s.ui.LiveLeases(prefix)
		for _, l := range ls {
			out = append(out, uiExpiry{Name: l.Name, Token: l.Token, ExpiresAt: ms(shownExpiry(l.Promise(), l.ExpiresAt, leader))})
		}
		return out, next
	}
	type grant struct {
		name  string
		token uint64
	}
	at := make(map[grant]int, len(rs))
	for _, r := range rs {
		g := grant{r.Name, r.Token}
		if i, ok := at[g]; ok {
			out[i].ExpiresAt = ms(shownExpiry(r.Promised, r.ExpiresAt, leader))
			continue
		}
		at[g] = len(out)
		out = append(out, uiExpiry{Name: r.Name, Token: r.Token, ExpiresAt: ms(shownExpiry(r.Promised, r.ExpiresAt, leader))})
	}
	return out, next
}

// maxBurst bounds how many lease events one stream message carries.
const maxBurst = 1000

// uiStream is the page's live feed, as Server-Sent Events: "snapshot"
// (the state, again after the node replaced its state with a snapshot or
// the page fell behind), "leases" (grants, releases and expiries from the
// Watch stream, in commit order), "activity" (the activity log, including
// fenced writes accepted and rejected), and once a second "tick" (cluster
// and wall-clock time, renewal counts, the new expiries of the grants
// renewed since the last tick, waiters, this node's raft state).
func (s *Server) uiStream(w http.ResponseWriter, r *http.Request) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "server: streaming is not supported on this connection", http.StatusInternalServerError)
		return
	}
	done, err := s.streams.open(r.Context(), r.RemoteAddr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer done()
	prefix := r.URL.Query().Get("prefix")
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	out := sse{w, f}
	ctx := r.Context()

	wake, cancel := s.ui.SubscribeActivity()
	defer cancel()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()

	var (
		wt      *node.Watch
		seq     uint64
		renewed uint64 // the renewals up to here are in the page
		prev    string
	)
	start := func(reason string) error {
		// Renewals after here are sent with the next tick; the snapshot
		// has those before (and maybe some after: sent twice, harmless).
		_, renewed, _ = s.ui.RenewedSince(math.MaxUint64, prefix)
		var err error
		if wt, err = s.node.Watch(prefix); err != nil {
			return err
		}
		snap := s.snapshot(wt, prefix)
		snap.Reason = reason
		seq = snap.Last
		return out.send("snapshot", snap)
	}
	defer func() {
		if wt != nil {
			wt.Cancel()
		}
	}()
	if err := start(""); err != nil {
		if wt == nil {
			http.Error(w, "server: "+err.Error(), http.StatusServiceUnavailable)
		}
		return
	}

	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-wt.Events:
			if !ok {
				err := wt.Err()
				if err == nil || errors.Is(err, node.ErrClosed) {
					return
				}
				reason := "reset"
				if errors.Is(err, node.ErrWatchLagged) {
					reason = "lagged"
				}
				if start(reason) != nil {
					return
				}
				continue
			}
			batch := []uiLeaseEvent{toUILeaseEvent(ev, s.node.IsLeader())}
		drain:
			for len(batch) < maxBurst {
				select {
				case ev, ok := <-wt.Events:
					if !ok {
						break drain
					}
					batch = append(batch, toUILeaseEvent(ev, s.node.IsLeader()))
				default:
					break drain
				}
			}
			if out.send("leases", batch) != nil {
				return
			}
		case <-wake:
			page := s.ui.Activity(seq, recentActivities)
			seq = page.Last
			if len(page.Activities) == 0 {
				continue
			}
			if out.send("activity", map[string]any{"activities": toUIActivities(page.Activities), "missed": page.Missed}) != nil {
				return
			}
		case <-ticker.C:
			st := s.node.Status()
			tick := uiTick{Now: ms(st.ClusterTime), Wall: time.Now().UnixMilli(), Status: uiStatusShort{State: st.State, LeaderID: st.LeaderID, Term: st.Term}}
			rs := s.ui.Renewals()
			if n := len(rs); n > 3 {
				rs = rs[n-3:]
			}
			tick.Renewals = toUIRenewals(rs)
			tick.Renewed, renewed = s.renewedSince(renewed, prefix)
			waiters := s.ui.Waiters(prefix)
			if key := fmt.Sprint(waiters); key != prev {
				prev, tick.Waiters = key, waiters
			}
			if out.send("tick", tick) != nil {
				return
			}
		}
	}
}

func toUILeaseEvent(ev node.WatchEvent, leader bool) uiLeaseEvent {
	return uiLeaseEvent{Type: ev.Type.String(), Index: ev.Index, At: ms(ev.At), Lease: toUILease(ev.Lease, leader)}
}

type uiTerm struct {
	Holder    string  `json:"holder"`
	Token     uint64  `json:"token"`
	Start     float64 `json:"start"`
	StartWall int64   `json:"start_wall,omitempty"`
	End       float64 `json:"end,omitempty"`
	EndWall   int64   `json:"end_wall,omitempty"`
	Ended     string  `json:"ended,omitempty"`
	Reason    string  `json:"reason,omitempty"`
	Writes    int     `json:"writes"`
}

type uiStale struct {
	At      float64 `json:"at"`
	Wall    int64   `json:"wall,omitempty"`
	Token   uint64  `json:"token"`
	Key     string  `json:"key"`
	Current uint64  `json:"current,omitempty"`
	Reason  string  `json:"reason"`
}

type uiHistoryJSON struct {
	Name    string    `json:"name"`
	Now     float64   `json:"now"`
	Terms   []uiTerm  `json:"terms"`
	Stale   []uiStale `json:"stale"`
	Waiters []string  `json:"waiters"`
	Reset   bool      `json:"reset,omitempty"`
}

// maxHistories bounds how many names one history request answers.
const maxHistories = 50

// uiHistory answers the history of one name (?name=) or of the names
// with a prefix (?prefix=, at most maxHistories of them).
func (s *Server) uiHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	_, now := s.ui.AppliedOps()
	if q.Has("prefix") {
		out := struct {
			Now       float64         `json:"now"`
			Histories []uiHistoryJSON `json:"histories"`
		}{Now: ms(now), Histories: []uiHistoryJSON{}}
		for _, h := range s.ui.Histories(q.Get("prefix"), maxHistories) {
			out.Histories = append(out.Histories, toUIHistory(h, now))
		}
		writeJSON(w, out)
		return
	}
	name := q.Get("name")
	if name == "" {
		http.Error(w, "server: history needs a lease name or a prefix: /ui/api/history?name=NAME or ?prefix=PREFIX", http.StatusBadRequest)
		return
	}
	writeJSON(w, toUIHistory(s.ui.History(name), now))
}

func toUIHistory(h node.History, now time.Duration) uiHistoryJSON {
	out := uiHistoryJSON{Name: h.Name, Now: ms(now), Terms: []uiTerm{}, Stale: []uiStale{}, Waiters: h.Waiters, Reset: h.Reset}
	for _, t := range h.Terms {
		ut := uiTerm{Holder: t.Holder, Token: t.Token, Start: ms(t.Start), StartWall: wallMS(t.StartWall), Writes: t.Writes}
		if t.Ended != 0 {
			ut.End, ut.EndWall, ut.Ended, ut.Reason = ms(t.End), wallMS(t.EndWall), t.Ended.String(), t.Reason
		}
		out.Terms = append(out.Terms, ut)
	}
	for _, sw := range h.Stale {
		out.Stale = append(out.Stale, uiStale{At: ms(sw.At), Wall: wallMS(sw.Wall), Token: sw.Token, Key: sw.Key, Current: sw.Current, Reason: sw.Reason})
	}
	return out
}

type uiMember struct {
	ID          string  `json:"id"`
	APIAddr     string  `json:"api_address"`
	RaftAddr    string  `json:"raft_address"`
	Voter       bool    `json:"voter"`
	Leader      bool    `json:"leader"`
	Self        bool    `json:"self"`
	Reachable   bool    `json:"reachable"`
	Error       string  `json:"error,omitempty"`
	LastContact float64 `json:"last_contact_ms_ago"` // -1: never
	State       string  `json:"state,omitempty"`
	Term        uint64  `json:"term,omitempty"`
	Applied     uint64  `json:"applied_index,omitempty"`
	Commit      uint64  `json:"commit_index,omitempty"`
	ClusterTime float64 `json:"cluster_time,omitempty"`
	LeaderID    string  `json:"leader_id,omitempty"`
}

type uiClusterJSON struct {
	Node        string     `json:"node"`
	ClusterID   string     `json:"cluster_id"`
	LeaderID    string     `json:"leader_id"`
	Term        uint64     `json:"term"`
	ClusterTime float64    `json:"cluster_time"`
	LastToken   uint64     `json:"last_token"`
	Leases      int        `json:"leases"`
	Members     []uiMember `json:"members"`
}

// probeTimeout bounds one member's status probe.
const probeTimeout = 700 * time.Millisecond

// uiCluster answers this node's view of the cluster, with each member's
// own status asked over the API (concurrently, each within probeTimeout).
func (s *Server) uiCluster(w http.ResponseWriter, r *http.Request) {
	st := s.node.Status()
	out := uiClusterJSON{Node: st.ID, ClusterID: st.ClusterID, LeaderID: st.LeaderID, Term: st.Term,
		ClusterTime: ms(st.ClusterTime), LastToken: st.LastToken, Leases: st.Leases, Members: make([]uiMember, len(st.Members))}
	var wg sync.WaitGroup
	for i, m := range st.Members {
		um := &out.Members[i]
		*um = uiMember{ID: m.ID, APIAddr: m.APIAddr, RaftAddr: m.RaftAddr, Voter: m.Voter, Leader: m.Leader, Self: m.ID == st.ID, LastContact: -1}
		if um.Self {
			um.Reachable, um.State, um.Term, um.Applied, um.Commit, um.ClusterTime, um.LeaderID = true, st.State, st.Term, st.AppliedIndex, st.CommitIndex, ms(st.ClusterTime), st.LeaderID
			um.LastContact = 0
			continue
		}
		if m.APIAddr == "" {
			um.Error = "no API address recorded"
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
			defer cancel()
			req := connect.NewRequest(&tenurev1.StatusRequest{})
			if a := r.Header.Get("Authorization"); a != "" {
				// Without member certificates, the caller's own token
				// lets the member answer.
				req.Header().Set("Authorization", a)
			}
			res, err := s.fwd.clients(m.APIAddr).cluster.Status(ctx, req)
			s.probes.note(m.APIAddr, err == nil)
			um.LastContact = s.probes.since(m.APIAddr)
			if err != nil {
				um.Error = err.Error()
				return
			}
			p := res.Msg
			um.Reachable, um.State, um.Term, um.Applied, um.Commit, um.LeaderID = true, p.GetState(), p.GetTerm(), p.GetAppliedIndex(), p.GetCommitIndex(), p.GetLeaderId()
			um.ClusterTime = ms(p.GetClusterTime().AsDuration())
		})
	}
	wg.Wait()
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].ID < out.Members[j].ID })
	writeJSON(w, out)
}

// probes remembers when each member last answered a status probe.
type probes struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (p *probes) note(addr string, ok bool) {
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = make(map[string]time.Time)
	}
	p.last[addr] = time.Now()
}

// since returns how long ago addr last answered, in milliseconds, or -1.
func (p *probes) since(addr string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.last[addr]
	if !ok {
		return -1
	}
	return ms(time.Since(t))
}

func (s *Server) uiMetrics(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"node": s.node.ID(), "samples": s.sampler.samples()})
}
