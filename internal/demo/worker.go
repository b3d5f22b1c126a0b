package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/fence"
)

// workerSpec is the script of one worker: acquire the lease (queueing if
// Wait is set and it is held), write each of Writes under Key with the
// grant's token, with Gap between writes, then release if Release is set.
// Worker A of the paused-writer scenarios writes twice with a gap; B
// queues, writes once and releases.
type workerSpec struct {
	Actor string
	Lease string
	TTL   time.Duration
	// Wait, if positive, is how long to queue for the lease when it is
	// held. Zero fails at once.
	Wait time.Duration
	// Store is a store spec: storeKV, storeMemory or storeDirPrefix+DIR.
	Store  string
	Key    string
	Writes []string
	// Gap is the time between two writes; GapKind says what it is:
	// gapPause (a simulated stop-the-world pause) or gapWork (ordinary
	// work, during which the demo may freeze the process).
	Gap     time.Duration
	GapKind string
	// Hold makes the worker wait after its gap until it is told to go on
	// (goOn closed in-process; a line on its standard input as a
	// process). The demo tells A once its pause is over and B has
	// written, so that a slow machine cannot reorder the story: however
	// late B's grant comes, A's late write comes after B's.
	Hold    bool
	goOn    <-chan struct{}
	Release bool
}

// Kinds of gap between a worker's writes.
const (
	gapPause = "pause"
	gapWork  = "work"
)

// Error codes of events (Event.Err).
const (
	errStale         = "stale_token"
	errHeld          = "lease_held"
	errIndeterminate = "indeterminate"
	errOther         = "error"
)

func errCode(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, client.ErrStaleToken), errors.Is(err, fence.ErrStale):
		return errStale
	case errors.Is(err, client.ErrLeaseHeld):
		return errHeld
	case errors.Is(err, client.ErrIndeterminate):
		return errIndeterminate
	}
	return errOther
}

// withErr returns e with the outcome of err: "ok" (good), or "failed"
// and the error (bad).
func withErr(e Event, err error) Event {
	e.Err = errCode(err)
	if err != nil {
		e.Outcome, e.Tone = "failed: "+err.Error(), ToneBad
	} else {
		e.Outcome, e.Tone = "ok", ToneGood
	}
	return e
}

// runWorker runs spec with c and st, reporting every step to emit. It
// returns an error only when the script could not go on (no lease, the
// context ended); a refused write is an event, not an error.
func runWorker(ctx context.Context, spec workerSpec, c *client.Client, st store, emit func(Event)) error {
	ev := func(e Event) {
		e.Actor = spec.Actor
		emit(e)
	}
	acquire := fmt.Sprintf("acquire %s, ttl %s", spec.Lease, fmtDuration(spec.TTL))
	l, err := c.Acquire(ctx, spec.Lease, spec.Actor, spec.TTL)
	if he, ok := errors.AsType[*client.HeldError](err); ok && spec.Wait > 0 {
		ev(Event{Op: "queue", Text: fmt.Sprintf("acquire %s: held by %s, waits", spec.Lease, he.Holder),
			Outcome: "queued", Tone: ToneWait})
		l, err = c.Acquire(ctx, spec.Lease, spec.Actor, spec.TTL, client.Wait(spec.Wait))
	}
	if err != nil {
		ev(withErr(Event{Op: "acquire", Text: acquire}, err))
		return fmt.Errorf("%s: acquire %s: %w", spec.Actor, spec.Lease, err)
	}
	ev(Event{Op: "acquire", Text: acquire, Token: l.Token, Outcome: "granted", Tone: ToneGood})

	for i, v := range spec.Writes {
		if i > 0 && spec.Gap > 0 {
			if err := gap(ctx, spec, ev); err != nil {
				return err
			}
		}
		err := st.Put(ctx, spec.Key, v, spec.Lease, l.Token)
		e := Event{Op: "put", Text: fmt.Sprintf("put %s = %q", spec.Key, v), Value: v, Token: l.Token, Err: errCode(err)}
		ds, described := st.(describedStore)
		switch {
		case described:
			e.Text = ds.describe(spec.Key, v)
		case !st.Fenced():
			e.Text = fmt.Sprintf("write %s = %q, no token check", spec.Key, v)
		}
		switch {
		case err == nil:
			e.Outcome, e.Tone = "ok", ToneGood
		case e.Err == errStale && described:
			e.Outcome, e.Tone = ds.rejected(), ToneFenced
		case e.Err == errStale:
			e.Outcome, e.Tone = "REJECTED: stale token", ToneFenced
		default:
			e.Outcome, e.Tone = "failed: "+err.Error(), ToneBad
		}
		ev(e)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	if spec.Release {
		err := c.Release(ctx, spec.Lease, l.Token)
		ev(withErr(Event{Op: "release", Text: "release " + spec.Lease, Token: l.Token}, err))
	}
	return nil
}

// gap waits between two writes, saying why.
func gap(ctx context.Context, spec workerSpec, ev func(Event)) error {
	d := fmtDuration(spec.Gap)
	if spec.GapKind == gapPause {
		ev(Event{Op: "pause", Text: fmt.Sprintf("stop-the-world pause of %s begins", d), Outcome: "paused", Tone: ToneWait})
	} else {
		ev(Event{Op: "work", Text: fmt.Sprintf("works for %s, well within its %s TTL", d, fmtDuration(spec.TTL)), Outcome: "working"})
	}
	start := time.Now()
	t := time.NewTimer(spec.Gap)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if spec.Hold {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-spec.goOn:
		}
	}
	if spec.GapKind == gapPause {
		text := "wakes up, still believing it holds the lease"
		if el := time.Since(start); el > spec.Gap+spec.Gap/10 {
			// The demo held A longer than --pause: B took that long.
			text = fmt.Sprintf("wakes up after %s, still believing it holds the lease", fmtDuration(el))
		}
		ev(Event{Op: "wake", Text: text})
	}
	return nil
}

// newClient returns a client for the demo's workers: it fails over
// quickly, so the failover scenario does not wait out long backoffs.
func newClient(endpoints []string) (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.RetryBackoff = 20 * time.Millisecond
	cfg.MaxRetryBackoff = 250 * time.Millisecond
	return client.New(cfg)
}

// args returns spec as the flags of a worker process (see ParseWorker).
func (s workerSpec) args(endpoints []string) []string {
	out := []string{
		"--actor", s.Actor,
		"--endpoints", strings.Join(endpoints, ","),
		"--lease", s.Lease,
		"--ttl", s.TTL.String(),
		"--store", s.Store,
		"--key", s.Key,
	}
	if s.Wait > 0 {
		out = append(out, "--wait", s.Wait.String())
	}
	for _, w := range s.Writes {
		out = append(out, "--write", w)
	}
	if s.Gap > 0 {
		out = append(out, "--gap", s.Gap.String(), "--gap-kind", s.GapKind)
	}
	if s.Hold {
		out = append(out, "--hold")
	}
	if s.Release {
		out = append(out, "--release")
	}
	return out
}

// Worker is one worker process of `tenure demo --real`: it runs its script
// against a tenure cluster and reports every step as a JSON line (the
// events of -o json, without scenario and time) on its standard output.
type Worker struct {
	spec      workerSpec
	endpoints []string
}

// ParseWorker parses the flags of a worker process. The flags are not a
// public interface: the demo passes them to the processes it starts.
func ParseWorker(args []string) (*Worker, error) {
	var (
		w         Worker
		endpoints string
	)
	s := &w.spec
	fs := flag.NewFlagSet("tenure demo worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&s.Actor, "actor", "", "worker name, also its holder name")
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated API addresses")
	fs.StringVar(&s.Lease, "lease", "", "lease name")
	fs.DurationVar(&s.TTL, "ttl", DefaultTTL, "lease TTL")
	fs.DurationVar(&s.Wait, "wait", 0, "queue this long for a held lease")
	fs.StringVar(&s.Store, "store", storeKV, "kv, or dir:DIR (files, no token check)")
	fs.StringVar(&s.Key, "key", "", "key to write")
	fs.Func("write", "value to write (repeat for several writes)", func(v string) error {
		s.Writes = append(s.Writes, v)
		return nil
	})
	fs.DurationVar(&s.Gap, "gap", 0, "time between writes")
	fs.StringVar(&s.GapKind, "gap-kind", gapWork, "work or pause")
	fs.BoolVar(&s.Hold, "hold", false, "after the gap, wait for a line on standard input")
	fs.BoolVar(&s.Release, "release", false, "release the lease after writing")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("demo worker: %w", err)
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			w.endpoints = append(w.endpoints, e)
		}
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("demo worker: unexpected argument %q", fs.Arg(0))
	case s.Actor == "" || s.Lease == "" || s.Key == "":
		return nil, errors.New("demo worker: --actor, --lease and --key are required")
	case len(w.endpoints) == 0:
		return nil, errors.New("demo worker: --endpoints is required")
	case s.GapKind != gapWork && s.GapKind != gapPause:
		return nil, fmt.Errorf("demo worker: --gap-kind must be %s or %s", gapWork, gapPause)
	case s.Store == storeMemory:
		return nil, errors.New("demo worker: a worker process cannot use the in-memory store")
	}
	return &w, nil
}

// Run runs the worker's script, writing its events to stdout as JSON
// lines. It returns an error if the script could not be carried out.
// With --hold, stdin is where it is told to go on.
func (w *Worker) Run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	if w.spec.Hold {
		goOn := make(chan struct{})
		go func() {
			// Any line, or the end of the input (the demo is gone), lets
			// it go on.
			bufio.NewReader(stdin).ReadString('\n')
			close(goOn)
		}()
		w.spec.goOn = goOn
	}
	c, err := newClient(w.endpoints)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := openStore(w.spec.Store, c, nil)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	var werr error
	err = runWorker(ctx, w.spec, c, st, func(e Event) {
		if werr == nil {
			werr = enc.Encode(e.toJSON())
		}
	})
	if err == nil {
		err = werr
	}
	return err
}
