package verify

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

// runElection is the body of an election worker: it leads names through
// election.Run, one term after another, and records every term (from the
// moment its grant was confirmed to the moment its context's end was
// observed) and every write it made under a term. A term ends when the
// worker gives up the leadership after 1-4s (half the time by handing it
// off to the next in line, Lease.Handoff: the next term begins at once,
// so live-terms-disjoint and the token checks cover handoffs), when the
// lease is lost, or when the run ends. After its context ended, each term tries one more
// write (a holder that has not noticed yet); election must refuse it
// without sending a request. The sessions allow for a server clock up to
// Drift faster than this machine's (the clock fault's fastest rate).
func (w *worker) runElection(ctx context.Context) {
	term := 0
	for run := 0; ctx.Err() == nil; run++ {
		name := w.cfg.Election[w.rnd.IntN(len(w.cfg.Election))]
		cfg := election.RunConfig{
			Client: w.cl,
			Name:   name,
			// A new holder for every Run: two sessions must not share one.
			// A lock-delay of the TTL: a term an operator revokes ends
			// (at the holder's next renewal, or its deadline) before the
			// next can begin, as after an expiry (live-terms-disjoint).
			Session: election.Config{Holder: fmt.Sprintf("e%d-%d", w.cfg.ID, run), TTL: w.cfg.TTL, Drift: w.cfg.Drift, LockDelay: w.cfg.TTL},
		}
		// A handoff ends this Run: the worker campaigns again as a new
		// holder, perhaps for another name.
		runCtx, endRun := context.WithCancel(ctx)
		err := election.Run(runCtx, cfg, func(lctx context.Context, l *election.Lease) error {
			term++
			start := now()
			var end atomic.Int64
			ended := make(chan struct{})
			stop := context.AfterFunc(lctx, func() { end.Store(now()); close(ended) })
			defer stop()
			hold := time.Duration(1000+w.rnd.IntN(3000)) * time.Millisecond
			deadline := time.Now().Add(hold)
			for lctx.Err() == nil && time.Now().Before(deadline) {
				sleepCtx(lctx, time.Duration(100+w.rnd.IntN(200))*time.Millisecond)
				if lctx.Err() != nil {
					break
				}
				w.termPut(l, term, false)
			}
			handedOff := false
			if lctx.Err() == nil && ctx.Err() == nil && w.rnd.IntN(2) == 0 {
				// Hand the leadership to the next in line (if nobody
				// waits, the grant is released). The term's context ends
				// before the handoff is sent.
				hctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, _ = l.Handoff(hctx, "")
				cancel()
				handedOff = errors.Is(l.Err(), election.ErrHandedOff)
				endRun()
			}
			if lctx.Err() != nil && ctx.Err() == nil {
				// The lease was lost or handed off: one more write, as a
				// holder that has not noticed would make.
				<-ended
				w.termPut(l, term, true)
			}
			e := end.Load()
			if e == 0 {
				e = now() // gave up while leading: the term ends now
			}
			w.emit(Record{Op: OpTerm, Name: name, Holder: l.Holder(), Term: term, OutToken: l.Token(), Call: start, Return: e, Outcome: Ok,
				Revoked: errors.Is(l.Err(), client.ErrRevoked), HandedOff: handedOff})
			return nil
		})
		endRun()
		if err != nil && ctx.Err() == nil {
			w.pause(ctx, 100*time.Millisecond, 300*time.Millisecond)
		}
	}
}

// termPut writes to the name's key with the term's lease.
func (w *worker) termPut(l *election.Lease, term int, late bool) {
	r := Record{Op: OpTermPut, Name: l.Name(), Holder: l.Holder(), Term: term, Key: KeyOf(l.Name()), Token: l.Token(), Late: late}
	w.mu.Lock()
	r.Value = fmt.Sprintf("e%d-%d", w.cfg.ID, w.seq+1)
	w.mu.Unlock()
	octx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	r.Call = now()
	_, err := l.Put(octx, r.Key, []byte(r.Value))
	r.Return = now()
	cancel()
	if errors.Is(err, election.ErrLost) || errors.Is(err, election.ErrReleased) {
		r.Outcome, r.Err = Refused, err.Error() // by the library, without a request
	} else {
		outcome(err, &r)
	}
	w.emit(r)
}
