package election

import (
	"context"
	"errors"
	"sync"
)

// RunConfig configures Run.
type RunConfig struct {
	// Client reaches the cluster. Required.
	Client Client
	// Name is the lease to lead. Required.
	Name string
	// Limit, above 1, makes Name a semaphore: Run holds one of its Limit
	// slots (as `tenure run --limit` does), so up to Limit holders run at
	// once, each with its own token. Default 0: one leader.
	Limit int
	// Shared makes Run hold Name shared (as `tenure run --shared` does,
	// see Session.AcquireShared): shared holders run at once, each with
	// its own token, an exclusive one alone. Not with a Limit above 1.
	Shared bool
	// Session configures the session Run leads with: holder, TTL and the
	// renewal timing.
	Session Config
	// OnStarted, if set, is called when this holder starts leading, before
	// fn.
	OnStarted func(l *Lease)
	// OnStopped, if set, is called when a term of leadership ended, after
	// fn returned. l.Err() says why: a *LostError, or ErrReleased when fn
	// returned or ctx ended.
	OnStopped func(l *Lease)
	// OnNewLeader, if set, is called for every new leader of Name as
	// Observe reports them, this holder included, from a goroutine of its
	// own. Run returns after its last call.
	OnNewLeader func(Leader)
}

// Run campaigns for cfg.Name and, whenever it leads, calls fn with a
// context that ends when the leadership is lost or ctx ends. The context
// ends at the lease's local deadline at the latest, before the server could
// grant the lease to anyone else, so fn must stop acting on the
// leadership (and on the data it protects) when it ends; the lease's
// token, l.Token(), fences its writes in case it does not stop in time.
//
// When the leadership is lost or handed off (Lease.Handoff, or a
// waiter of a higher priority asked for it: see Config.Priority), Run
// campaigns again and calls fn again once
// it leads; fn's error from a lost term is dropped. If fn returns while
// this holder still leads, Run releases the lease and returns fn's error:
// a job run under a lock. When ctx ends, Run releases the lease (after fn
// returned) and returns nil. Run returns other errors when it cannot
// campaign at all (an invalid name or TTL).
func Run(ctx context.Context, cfg RunConfig, fn func(ctx context.Context, l *Lease) error) error {
	switch {
	case cfg.Client == nil:
		return errors.New("election: RunConfig.Client is required")
	case cfg.Name == "":
		return errors.New("election: RunConfig.Name is required")
	case fn == nil:
		return errors.New("election: Run needs a function to run")
	}
	s, err := New(cfg.Client, cfg.Session)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RenewTimeout)
		defer cancel()
		s.Close(cctx)
	}()

	if cfg.OnNewLeader != nil {
		var wg sync.WaitGroup
		octx, cancel := context.WithCancel(ctx)
		defer wg.Wait()
		defer cancel()
		leaders, err := s.Observe(octx, cfg.Name)
		if err != nil {
			return err
		}
		wg.Go(func() {
			for ld := range leaders {
				cfg.OnNewLeader(ld)
			}
		})
	}

	for {
		l, err := s.acquireMode(ctx, cfg.Name, true, cfg.Limit, cfg.Shared)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ferr := s.lead(ctx, cfg, l, fn)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(l.Err(), ErrLost) && !errors.Is(l.Err(), ErrHandedOff) {
			return ferr // fn returned while leading
		}
	}
}

// lead runs one term of leadership: fn until it returns, then a release
// unless the lease was lost.
func (s *Session) lead(ctx context.Context, cfg RunConfig, l *Lease, fn func(context.Context, *Lease) error) error {
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Ctx(), func() { cancel(context.Cause(l.Ctx())) })
	if cfg.OnStarted != nil {
		cfg.OnStarted(l)
	}
	err := fn(fctx, l)
	stop()
	cancel(nil)
	if !errors.Is(l.Err(), ErrLost) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RenewTimeout)
		l.Release(rctx)
		cancel()
	}
	if cfg.OnStopped != nil {
		cfg.OnStopped(l)
	}
	return err
}
