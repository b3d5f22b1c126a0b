package demo

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The paused-writer scenarios (Fenced and TimeoutLock) run the same
// script against two stores:
//
//	A  acquire (token t), write "A-1", stall longer than the TTL, write "A-2"
//	B  started once A holds the lease: queue for it, write "B-1", release
//
// In-process, A's stall is part of its own script (a sleep standing in for
// a stop-the-world pause). With real processes, A "works" for half the TTL
// and the demo freezes it with SIGSTOP meanwhile and thaws it with SIGCONT
// after the pause. Either way A's lease expires while it stalls and B
// takes over; the scenarios differ only in whether the store checks the
// token of A's late write. A goes on only once B has written (or given
// up), even if that takes longer than the pause: on a starved machine B's
// grant can come late, and the story must not turn around.

const (
	reportKey = "report"
	valueA1   = "A-1"
	valueA2   = "A-2"
	valueB1   = "B-1"
)

// launcher starts workers.
type launcher interface {
	launch(ctx context.Context, spec workerSpec) (*workerRun, error)
}

// workerRun is a started worker.
type workerRun struct {
	// events delivers the worker's events and is closed when it finished.
	events chan Event
	// err is why the worker failed, if it did; read it after events is
	// closed.
	err error
	// pid is the process ID of a worker process; 0 in-process.
	pid int
	// freeze and resume stop and continue a worker process (SIGSTOP,
	// SIGCONT); nil in-process.
	freeze, resume func() error
	// goOn tells a worker with spec.Hold to go on after its gap; it does
	// nothing the second time, and nothing without Hold.
	goOn func()
}

// drain waits for w to finish, dropping its events.
func (w *workerRun) drain() {
	for range w.events {
	}
}

// inProcess runs workers as goroutines, each with its own client.
type inProcess struct {
	endpoints []string
	mem       *memStore
	// pg is the store of storePostgres; nil without Postgres.
	pg *pgDemo
}

func (l *inProcess) launch(ctx context.Context, spec workerSpec) (*workerRun, error) {
	c, err := newClient(l.endpoints)
	if err != nil {
		return nil, err
	}
	var st store = l.pg
	if spec.Store != storePostgres || l.pg == nil {
		st, err = openStore(spec.Store, c, l.mem)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	w := &workerRun{events: make(chan Event, 16), goOn: func() {}}
	if spec.Hold {
		ch := make(chan struct{})
		spec.goOn, w.goOn = ch, sync.OnceFunc(func() { close(ch) })
	}
	go func() {
		defer close(w.events)
		defer c.Close()
		w.err = runWorker(ctx, spec, c, st, func(e Event) {
			select {
			case w.events <- e:
			case <-ctx.Done():
			}
		})
	}()
	return w, nil
}

// pausedEnv is where a paused-writer scenario runs.
type pausedEnv struct {
	launcher launcher
	// storeSpec is the store the workers are told to write to; store is
	// how the demo reads the final value from it.
	storeSpec string
	store     store
	// external is set when A is a process the demo freezes (SIGSTOP)
	// rather than a goroutine that pauses itself.
	external bool
}

// runPausedWriter runs a paused-writer scenario and judges it. The error
// is for a scenario that could not run (a worker could not start, the
// demo was interrupted); a wrong outcome is a failed Result.
func runPausedWriter(ctx context.Context, tl *timeline, cfg *Config, sc Scenario, env pausedEnv) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Pause+cfg.TTL+30*time.Second)
	defer cancel()
	leaseName := "demo/" + string(sc)
	specA := workerSpec{
		Actor: "A", Lease: leaseName, TTL: cfg.TTL, Store: env.storeSpec, Key: reportKey,
		Writes: []string{valueA1, valueA2}, Gap: cfg.Pause, GapKind: gapPause, Hold: true,
	}
	if env.external {
		specA.Gap, specA.GapKind = cfg.TTL/2, gapWork
	}
	specB := workerSpec{
		Actor: "B", Lease: leaseName, TTL: cfg.TTL, Store: env.storeSpec, Key: reportKey,
		Wait: cfg.TTL + 20*time.Second, Writes: []string{valueB1}, Release: true,
	}

	a, err := env.launcher.launch(ctx, specA)
	if err != nil {
		return Result{}, fmt.Errorf("start worker A: %w", err)
	}
	var b *workerRun
	defer func() {
		// On every way out: stop the workers (the context kills worker
		// processes) and wait for them.
		cancel()
		a.drain()
		if b != nil {
			b.drain()
		}
	}()

	var (
		o        = pausedOutcome{token: map[string]uint64{}, puts: map[string][]Event{}}
		evA      = a.events
		evB      chan Event
		resumeC  <-chan time.Time
		frozenAt time.Time
		// A goes on once its pause is over (frozen: the demo's timer;
		// in-process: A's own) and B has written or given up.
		pauseOver = !env.external
		bDone     bool
	)
	wakeA := func() error {
		if !pauseOver || !bDone {
			return nil
		}
		if env.external && !frozenAt.IsZero() {
			if err := a.resume(); err != nil {
				return fmt.Errorf("resume worker A: %w", err)
			}
			tl.record(Event{Actor: "demo", Op: "resume",
				Text:    fmt.Sprintf("SIGCONT A after %s frozen", fmtDuration(time.Since(frozenAt))),
				Outcome: "resumed"})
			frozenAt = time.Time{}
		}
		a.goOn()
		return nil
	}
	handle := func(e Event) {
		switch {
		case e.Op == "acquire" && e.Err == "":
			o.token[e.Actor] = e.Token
			if e.Actor == "B" && o.token["A"] != 0 {
				// A never releases: B's grant means A's lease ran out.
				// The expiry and the grant to the first waiter commit in
				// the same raft entry.
				tl.record(Event{Actor: "cluster", Op: "expired",
					Text:  fmt.Sprintf("A's lease expired: %s, no renewal", fmtDuration(cfg.TTL)),
					Token: o.token["A"], Outcome: "expired", Tone: ToneWait})
			}
		case e.Op == "put" && e.Actor == "A" && e.Err == "" && o.token["B"] != 0:
			e.Outcome, e.Tone = "ACCEPTED after A's lease expired", ToneBad
		}
		e = tl.record(e)
		if e.Op == "put" {
			o.puts[e.Actor] = append(o.puts[e.Actor], e)
		}
	}

	for evA != nil || evB != nil {
		select {
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		case <-resumeC:
			resumeC, pauseOver = nil, true
			if err := wakeA(); err != nil {
				return Result{}, err
			}
		case e, ok := <-evB:
			if !ok {
				evB, bDone = nil, true
				if b.err != nil {
					o.failure = fmt.Sprintf("worker B failed: %v", b.err)
				}
			} else {
				handle(e)
				bDone = bDone || e.Op == "put"
			}
			if err := wakeA(); err != nil {
				return Result{}, err
			}
		case e, ok := <-evA:
			if !ok {
				evA = nil
				if a.err != nil {
					o.failure = fmt.Sprintf("worker A failed: %v", a.err)
				}
				continue
			}
			handle(e)
			switch {
			case e.Op == "acquire" && e.Err == "" && b == nil:
				// B starts once A holds the lease, so it has to queue.
				if b, err = env.launcher.launch(ctx, specB); err != nil {
					return Result{}, fmt.Errorf("start worker B: %w", err)
				}
				evB = b.events
			case e.Op == "work" && env.external:
				if err := a.freeze(); err != nil {
					return Result{}, fmt.Errorf("freeze worker A: %w", err)
				}
				frozenAt = time.Now()
				tl.record(Event{Actor: "demo", Op: "freeze",
					Text:    fmt.Sprintf("SIGSTOP A (pid %d) for %s", a.pid, fmtDuration(cfg.Pause)),
					Outcome: "frozen", Tone: ToneWait})
				resumeC = time.After(cfg.Pause)
			}
		}
	}

	o.final, o.finalToken, err = env.store.Get(ctx, reportKey)
	if err != nil && o.failure == "" {
		o.failure = fmt.Sprintf("reading the final value: %v", err)
	}
	passed, summary := o.judge(sc)
	if err == nil {
		check := Event{Actor: "check", Op: "read", Text: fmt.Sprintf("read %s = %q", reportKey, o.final), Value: o.final,
			Token: o.finalToken}
		switch {
		case o.final == valueB1:
			check.Outcome, check.Tone = "B's write kept", ToneGood
		case o.final == valueA2:
			check.Outcome, check.Tone = "LOST UPDATE: B's write was overwritten", ToneBad
		default:
			check.Outcome, check.Tone = "unexpected value", ToneBad
		}
		tl.record(check)
	}
	return Result{Scenario: sc, Passed: passed, Summary: summary}, nil
}

// pausedOutcome is what a paused-writer scenario observed.
type pausedOutcome struct {
	token      map[string]uint64  // by actor
	puts       map[string][]Event // by actor, in order
	final      string
	finalToken uint64
	failure    string // a worker or the final read failed
}

// judge compares o with the expected outcome of sc and says what happened.
func (o *pausedOutcome) judge(sc Scenario) (bool, string) {
	if o.failure != "" {
		return false, o.failure
	}
	ta, tb := o.token["A"], o.token["B"]
	pa, pb := o.puts["A"], o.puts["B"]
	switch {
	case ta == 0:
		return false, "A was not granted the lease"
	case tb == 0:
		return false, "B was not granted the lease after A's expired"
	case tb <= ta:
		return false, fmt.Sprintf("B's token %d is not larger than A's %d", tb, ta)
	case len(pa) != 2 || len(pb) != 1:
		return false, fmt.Sprintf("A made %d writes and B %d; want 2 and 1", len(pa), len(pb))
	case pa[0].Err != "":
		return false, fmt.Sprintf("A's first write failed: %s", pa[0].Outcome)
	case pb[0].Err != "":
		return false, fmt.Sprintf("B's write failed: %s", pb[0].Outcome)
	}
	late := pa[1]
	if sc == Fenced || sc == Postgres {
		switch {
		case late.Err == "" && late.At < pb[0].At:
			return false, "A's second write was accepted before B took over: A did not stall past its TTL"
		case late.Err == "":
			return false, "A's late write was accepted; want it rejected with a stale token"
		case late.Err != errStale:
			return false, fmt.Sprintf("A's late write failed with %q; want a stale-token rejection", late.Outcome)
		case o.final != valueB1 || o.finalToken != tb:
			return false, fmt.Sprintf("the final value is %q (token %d); want B's %q (token %d)", o.final, o.finalToken, valueB1, tb)
		}
		if sc == Postgres {
			return true, fmt.Sprintf("tenure_fence rolled back A's late transaction with token %d because B had been granted token %d; the table keeps B's %q.",
				ta, tb, valueB1)
		}
		return true, fmt.Sprintf("the store rejected A's late write with token %d because B had been granted token %d; the final value is B's %q.",
			ta, tb, valueB1)
	}
	switch {
	case late.Err != "":
		return false, fmt.Sprintf("A's late write failed: %s", late.Outcome)
	case late.At < pb[0].At:
		return false, "A's late write landed before B's write, so nothing was overwritten: the pause was too close to the TTL; give --pause more room"
	case o.final != valueA2:
		return false, fmt.Sprintf("the final value is %q; want A's late %q over B's %q", o.final, valueA2, valueB1)
	}
	return true, fmt.Sprintf("LOST UPDATE: A's late write (token %d) overwrote B's %q (token %d). The lock's timeout did its job; the data still got corrupted.",
		ta, valueB1, tb)
}
