package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/tenuredproc"
	"github.com/tenure-io/tenure/internal/tlsconfig"
)

// WorkerConfig is what a worker process is told, as JSON in its
// environment (TENURE_VERIFY_WORKER).
type WorkerConfig struct {
	ID        int           `json:"id"`
	Seed      uint64        `json:"seed"`
	Endpoints []string      `json:"endpoints"`
	Names     []string      `json:"names"`
	TTL       time.Duration `json:"ttl"`
	// UnsafeStore, when set, is the URL of the harness's unfenced store:
	// puts and gets go there instead of to tenure's fenced store.
	UnsafeStore string `json:"unsafe_store,omitempty"`
	// Election makes the worker hold leases through package election
	// (Run) on these names instead of the plain client traffic.
	Election []string `json:"election,omitempty"`
	// Drift is the election sessions' clock-rate allowance.
	Drift float64 `json:"drift,omitempty"`
	// CACert and Token, when set, make the worker speak TLS (verifying
	// with CACert) and authenticate with Token (--tls).
	CACert string `json:"cacert,omitempty"`
	Token  string `json:"token,omitempty"`
	// AdminToken, when set (with --tls), is the token the worker revokes
	// with: revoking needs the admin role.
	AdminToken string `json:"admin_token,omitempty"`
	// Elected are the names election workers lead, which a lease worker
	// revokes now and then too.
	Elected []string `json:"elected,omitempty"`
	// RW are the names of the read-write workload (rw.go), which a lease
	// worker now and then holds shared or exclusive.
	RW []string `json:"rw,omitempty"`
}

// WorkerEnv is the environment variable that turns the tenure-verify
// binary into a worker.
const WorkerEnv = "TENURE_VERIFY_WORKER"

// WorkerSet is the running worker processes.
type WorkerSet struct {
	mu      sync.Mutex
	procs   []*exec.Cmd
	history History
	wg      sync.WaitGroup
	Errs    []string
	// stopping is set by Stop: a worker that exits before it did not
	// run to the end, and its history is incomplete (Early).
	stopping atomic.Bool
	// Early lists the workers that exited before Stop.
	Early []EarlyExit
	// exited[i] is closed once worker i has exited and been accounted.
	exited []chan struct{}
}

// EarlyExit is a worker process that ended before the run did: how and
// when, and the last operation it recorded.
type EarlyExit struct {
	Worker int
	At     time.Time
	State  string // as os.ProcessState says: "signal: killed", "exit status 1"
	Ops    int    // operations it recorded
}

// StartWorkers launches one process per config, re-executing this binary.
func StartWorkers(cfgs []WorkerConfig, stderr *os.File) (*WorkerSet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ws := &WorkerSet{}
	for _, c := range cfgs {
		b, _ := json.Marshal(c)
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), WorkerEnv+"="+string(b))
		cmd.Stderr = stderr
		tenuredproc.DieWithParent(cmd) // no worker outlives a killed harness
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := tenuredproc.StartCmd(cmd); err != nil {
			ws.Stop()
			return nil, fmt.Errorf("start worker %d: %w", c.ID, err)
		}
		ws.procs = append(ws.procs, cmd)
		exited := make(chan struct{})
		ws.exited = append(ws.exited, exited)
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			defer close(exited)
			h, err := ReadJSONL(out)
			cmd.Wait()
			ws.mu.Lock()
			ws.history = append(ws.history, h...)
			if err != nil {
				ws.Errs = append(ws.Errs, err.Error())
			}
			if !ws.stopping.Load() {
				ws.Early = append(ws.Early, EarlyExit{Worker: c.ID, At: time.Now(), State: cmd.ProcessState.String(), Ops: len(h)})
			}
			ws.mu.Unlock()
		}()
	}
	return ws, nil
}

// Signal sends sig to worker i; false if there is no such worker.
func (ws *WorkerSet) Signal(i int, sig syscall.Signal) bool {
	if i < 0 || i >= len(ws.procs) {
		return false
	}
	return ws.procs[i].Process.Signal(sig) == nil
}

// ResumeAll sends SIGCONT to every worker.
func (ws *WorkerSet) ResumeAll() {
	for i := range ws.procs {
		ws.Signal(i, syscall.SIGCONT)
	}
}

// Stop resumes and terminates every worker, waits for them, and returns
// the merged history. A terminated worker finishes recording its op in
// flight (as indeterminate) before it exits.
func (ws *WorkerSet) Stop() History {
	ws.stopping.Store(true)
	for i := range ws.procs {
		ws.Signal(i, syscall.SIGCONT)
		ws.Signal(i, syscall.SIGTERM)
	}
	ws.wg.Wait()
	return ws.history
}

// RunWorker is the body of a worker process: it runs traffic until
// SIGTERM, writing one JSON record per operation to stdout.
func RunWorker(cfgJSON string) int {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "worker: bad config: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ccfg := client.DefaultConfig()
	ccfg.Endpoints = cfg.Endpoints
	ccfg.RequestTimeout = time.Second
	ccfg.DialTimeout = 500 * time.Millisecond
	// Count the HTTP requests of each op, so that a retried op is known.
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: (&net.Dialer{Timeout: ccfg.DialTimeout}).DialContext}
	if cfg.CACert != "" {
		tc, err := tlsconfig.Client(cfg.CACert, "", "")
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker: %v\n", err)
			return 1
		}
		p.SetHTTP2(true)
		tr.TLSClientConfig = tc
		ccfg.TLS = tc // https endpoints
	}
	ccfg.Token = cfg.Token
	rt := &countingTransport{next: tr}
	ccfg.HTTPClient = &http.Client{Transport: rt}
	cl, err := client.New(ccfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		return 1
	}
	defer cl.Close()
	admin := cl
	if cfg.AdminToken != "" {
		ccfg.Token = cfg.AdminToken
		if admin, err = client.New(ccfg); err != nil {
			fmt.Fprintf(os.Stderr, "worker: %v\n", err)
			return 1
		}
		defer admin.Close()
	}
	w := &worker{cfg: cfg, cl: cl, admin: admin, rt: rt, rnd: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))),
		holder: fmt.Sprintf("w%d", cfg.ID), enc: json.NewEncoder(os.Stdout), http: &http.Client{}, seen: map[string]uint64{}}
	if len(cfg.Election) > 0 {
		w.runElection(ctx)
		return 0
	}
	w.run(ctx)
	return 0
}

// countingTransport counts round trips.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

type worker struct {
	mu     sync.Mutex // guards emit and seq (election workers write from two goroutines)
	cfg    WorkerConfig
	cl     *client.Client
	admin  *client.Client // revokes (the admin role with --tls)
	rt     *countingTransport
	rnd    *rand.Rand
	holder string
	enc    *json.Encoder
	http   *http.Client
	seq    int

	name  string // lease held, if token != 0
	token uint64
	delay time.Duration // its lock-delay
	// seen is the token a held answer last named, per name: a revoke
	// sometimes names it.
	seen map[string]uint64
}

// lockDelays are the lock-delays an acquire asks for, at random.
var lockDelays = []time.Duration{0, 0, 500 * time.Millisecond, 1500 * time.Millisecond}

func (w *worker) emit(r Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	r.Worker, r.Seq = w.cfg.ID, w.seq
	r.Attempts = int(w.rt.n.Swap(0))
	w.enc.Encode(r)
}

// outcome classifies an error: definite refusals, or indeterminate. An op
// the run's end interrupts (its context is bounded by the run's) is thus
// indeterminate unless it was definitely refused.
func outcome(err error, r *Record) {
	switch {
	case err == nil:
		r.Outcome = Ok
		return
	case errors.Is(err, client.ErrIndeterminate):
		// Before the refusals: a retry the cluster no longer
		// remembers the outcome of (client.ErrNotApplied).
		r.Outcome = Indeterminate
	case errors.Is(err, client.ErrLeaseHeld):
		r.Outcome = Held
		if he, ok := errors.AsType[*client.HeldError](err); ok {
			r.OutHolder, r.OutToken, r.Delayed = he.Holder, he.Token, he.LockDelay
		}
	case errors.Is(err, client.ErrStaleToken):
		r.Outcome = Stale
	case errors.Is(err, client.ErrNotFound):
		r.Outcome = NotFound
	case errors.Is(err, client.ErrInvalid):
		r.Outcome = Failed
	default:
		r.Outcome = Indeterminate
	}
	r.Err = err.Error()
}

func (w *worker) pause(ctx context.Context, lo, hi time.Duration) {
	sleepCtx(ctx, lo+time.Duration(w.rnd.Int64N(int64(hi-lo))))
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if w.token == 0 {
			w.name = w.cfg.Names[w.rnd.IntN(len(w.cfg.Names))]
			switch p := w.rnd.IntN(20); {
			case p == 0:
				if n := w.rnd.IntN(len(w.cfg.Names) + len(w.cfg.Elected)); n >= len(w.cfg.Names) {
					w.revoke(ctx, w.cfg.Elected[n-len(w.cfg.Names)], OpTermRevoke)
				} else {
					w.revoke(ctx, w.name, OpRevoke)
				}
			case p < 5:
				w.get(ctx, w.name)
			case p < 8 && len(w.cfg.RW) > 0:
				w.rwCycle(ctx)
			default:
				w.delay = lockDelays[w.rnd.IntN(len(lockDelays))]
				w.acquire(ctx, w.name, w.rnd.IntN(2) == 0)
			}
			if w.token == 0 {
				w.pause(ctx, 50*time.Millisecond, 300*time.Millisecond)
			}
			continue
		}
		switch p := w.rnd.IntN(100); {
		case p < 40:
			w.put(ctx)
		case p < 65:
			w.renew(ctx)
		case p < 75:
			w.get(ctx, w.name)
		case p < 85:
			w.release(ctx)
		case p < 90:
			// Hold on without renewing past the TTL: the next op finds the
			// lease expired (and the server frees it for someone else).
			sleepCtx(ctx, w.cfg.TTL+w.cfg.TTL/4)
			w.put(ctx)
		default:
			w.acquire(ctx, w.name, false) // re-acquire: a renewal
		}
		w.pause(ctx, 50*time.Millisecond, 250*time.Millisecond)
	}
}

func now() int64 { return time.Now().UnixNano() }

func (w *worker) acquire(ctx context.Context, name string, wait bool) {
	// A re-acquire (a renewal) keeps the grant's lock-delay.
	r := Record{Op: OpAcquire, Name: name, Holder: w.holder, Wait: wait, LockDelay: w.delay}
	var opts []client.AcquireOption
	if w.delay > 0 {
		opts = append(opts, client.LockDelay(w.delay))
	}
	l, err := w.acquireCall(ctx, &r, opts...)
	if err == nil {
		w.name, w.token = name, l.Token
	} else if r.Outcome == Indeterminate && w.token != 0 {
		w.token = 0 // it may have been re-granted under a new token
	} else if r.Outcome == Held {
		w.seen[name] = r.OutToken
	}
	w.emit(r)
}

// acquireCall makes the acquire r describes (r.Name for r.Holder, with a
// wait of 2s if r.Wait) with opts, and records in r when it was called
// and returned and what came of it.
func (w *worker) acquireCall(ctx context.Context, r *Record, opts ...client.AcquireOption) (client.Lease, error) {
	d := 3 * time.Second
	if r.Wait {
		opts = append(opts, client.Wait(2*time.Second))
		d = 5 * time.Second
	}
	octx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	r.Call = now()
	l, err := w.cl.Acquire(octx, r.Name, r.Holder, w.cfg.TTL, opts...)
	r.Return = now()
	outcome(err, r)
	if err == nil {
		r.OutToken, r.Remaining = l.Token, int64(l.Remaining)
	}
	return l, err
}

// revoke revokes name as an operator: every grant of it, or now and then
// the one a held answer named. op is OpRevoke, or OpTermRevoke for a name
// of the election workers.
func (w *worker) revoke(ctx context.Context, name, op string) {
	r := Record{Op: op, Name: name, Holder: w.holder}
	if tok := w.seen[name]; tok != 0 && w.rnd.IntN(3) == 0 {
		r.Token = tok
	}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r.Call = now()
	ls, err := w.admin.Revoke(octx, name, r.Token, fmt.Sprintf("verify w%d", w.cfg.ID))
	r.Return = now()
	cancel()
	outcome(err, &r)
	if err == nil {
		if len(ls) != 1 {
			r.Outcome, r.Err = Failed, fmt.Sprintf("revoked %d grants of a plain lease", len(ls))
		} else {
			r.OutToken, r.OutHolder = ls[0].Token, ls[0].Holder
		}
	}
	w.emit(r)
}

func (w *worker) renew(ctx context.Context) {
	r := Record{Op: OpRenew, Name: w.name, Holder: w.holder, Token: w.token}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r.Call = now()
	l, err := w.cl.RenewOne(octx, w.name, w.token)
	r.Return = now()
	cancel()
	outcome(err, &r)
	if err == nil {
		r.OutToken, r.Remaining = l.Token, int64(l.Remaining)
	} else if r.Outcome == Stale {
		w.token = 0
	}
	w.emit(r)
}

func (w *worker) release(ctx context.Context) {
	r := Record{Op: OpRelease, Name: w.name, Holder: w.holder, Token: w.token}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r.Call = now()
	err := w.cl.Release(octx, w.name, w.token)
	r.Return = now()
	cancel()
	outcome(err, &r)
	w.token = 0
	w.emit(r)
}

func (w *worker) put(ctx context.Context) {
	r := Record{Op: OpPut, Name: w.name, Holder: w.holder, Key: KeyOf(w.name), Token: w.token,
		Value: fmt.Sprintf("w%d-%d", w.cfg.ID, w.seq+1)}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r.Call = now()
	var err error
	if w.cfg.UnsafeStore != "" {
		err = w.unsafePut(octx, r.Key, r.Value, r.Token)
	} else {
		_, err = w.cl.Put(octx, r.Key, []byte(r.Value), w.name, w.token)
	}
	r.Return = now()
	cancel()
	outcome(err, &r)
	if r.Outcome == Stale {
		w.token = 0
	}
	w.emit(r)
}

func (w *worker) get(ctx context.Context, name string) {
	r := Record{Op: OpGet, Name: name, Key: KeyOf(name)}
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r.Call = now()
	var (
		kv  client.KV
		err error
	)
	if w.cfg.UnsafeStore != "" {
		kv, err = w.unsafeGet(octx, r.Key)
	} else {
		kv, err = w.cl.KVGet(octx, r.Key)
	}
	r.Return = now()
	cancel()
	outcome(err, &r)
	if err == nil {
		r.OutValue, r.OutToken = string(kv.Value), kv.Token
	}
	w.emit(r)
}

func (w *worker) unsafePut(ctx context.Context, key, value string, token uint64) error {
	q := url.Values{"key": {key}, "value": {value}, "token": {fmt.Sprint(token)}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.UnsafeStore+"/put?"+q.Encode(), nil)
	res, err := w.http.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("unsafe store: %s", res.Status)
	}
	return nil
}

func (w *worker) unsafeGet(ctx context.Context, key string) (client.KV, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.cfg.UnsafeStore+"/get?key="+url.QueryEscape(key), nil)
	res, err := w.http.Do(req)
	if err != nil {
		return client.KV{}, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return client.KV{}, client.ErrNotFound
	}
	var v FinalValue
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		return client.KV{}, err
	}
	return client.KV{Key: key, Value: []byte(v.Value), Token: v.Token}, nil
}

// UnsafeStore is the harness-side key-value store of --unsafe: it accepts
// every write whatever its token. It exists only to prove that the checker
// catches what fencing prevents; tenure itself has no such path.
type UnsafeStore struct {
	mu sync.Mutex
	m  map[string]FinalValue
}

// NewUnsafeStore returns an empty store.
func NewUnsafeStore() *UnsafeStore { return &UnsafeStore{m: map[string]FinalValue{}} }

func (s *UnsafeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch strings.TrimPrefix(r.URL.Path, "/") {
	case "put":
		var tok uint64
		fmt.Sscan(r.URL.Query().Get("token"), &tok)
		s.m[key] = FinalValue{Key: key, Found: true, Value: r.URL.Query().Get("value"), Token: tok}
	case "get":
		v, ok := s.m[key]
		if !ok {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(v)
	default:
		http.NotFound(w, r)
	}
}

// Final returns the value of key.
func (s *UnsafeStore) Final(key string) FinalValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return FinalValue{Key: key}
	}
	return v
}
