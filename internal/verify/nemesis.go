package verify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fault kinds.
const (
	FaultKill        = "kill"         // SIGKILL a node, restart it after Dur
	FaultPause       = "pause"        // SIGSTOP a node, SIGCONT after Dur
	FaultPartition   = "partition"    // isolate a node's raft traffic for Dur
	FaultClock       = "clock"        // restart a node with clock rate Rate, make it leader, restore after Dur
	FaultTransfer    = "transfer"     // move leadership to another node
	FaultPauseClient = "pause-client" // SIGSTOP a worker process, SIGCONT after Dur

	FaultFlap       = "flap"             // transfer leadership again Gap after each takeover, for Dur
	FaultSnapshot   = "snapshot"         // cut a follower off until the log it needs is compacted away, then heal
	FaultSplit      = "partition-split"  // cut a minority (with the leader or node Target) from the majority for Dur
	FaultBridge     = "partition-bridge" // cut the link between the leader (or node Target) and one other node for Dur
	FaultMember     = "member"           // remove a follower (Leave), wipe its data, re-add it with --join after Dur
	FaultRestartAll = "restart-all"      // SIGKILL every node, restart them all after Dur
	FaultDamaged    = "damaged-dir"      // stop a follower, empty its raft.db: tenured must refuse to start; restore, restart
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultKill, FaultPause, FaultPartition, FaultClock, FaultTransfer, FaultPauseClient,
	FaultFlap, FaultSnapshot, FaultSplit, FaultBridge, FaultMember, FaultRestartAll, FaultDamaged}

// InvDamagedRefused is reported when tenured starts on a data directory
// whose raft.db was emptied (DESIGN.md section 6: it must exit 1 naming
// the file).
const InvDamagedRefused = "damaged-dir-refused"

// ClockRates are the rates the clock fault picks from; the model assumes
// cluster time never runs faster than the largest.
var ClockRates = []float64{0.8, 1.25}

// Fault is one scheduled fault. Target is a node index, or -1 for "the
// leader at that moment" (resolved when the fault starts); for
// pause-client it is a worker index.
type Fault struct {
	At     time.Duration `json:"at"`
	Kind   string        `json:"kind"`
	Target int           `json:"target"`
	Dur    time.Duration `json:"dur"`
	Rate   float64       `json:"rate,omitempty"`
	// Gap is how long after each takeover flap transfers again.
	Gap time.Duration `json:"gap,omitempty"`
}

func (f Fault) String() string {
	tgt := fmt.Sprintf("node %d", f.Target+1)
	if f.Target < 0 {
		tgt = "leader"
	}
	if f.Kind == FaultPauseClient {
		tgt = fmt.Sprintf("worker %d", f.Target)
	}
	s := fmt.Sprintf("%6.1fs %-16s %-8s", f.At.Seconds(), f.Kind, tgt)
	if f.Dur > 0 {
		s += fmt.Sprintf(" for %.1fs", f.Dur.Seconds())
	}
	if f.Rate != 0 {
		s += fmt.Sprintf(" rate %.2f", f.Rate)
	}
	if f.Gap != 0 {
		s += fmt.Sprintf(" gap %s", f.Gap.Round(time.Millisecond))
	}
	return s
}

// Schedule is the whole fault plan of a run, generated from the seed
// before the run starts.
type Schedule []Fault

// Hash returns a short hash of the schedule.
func (s Schedule) Hash() string {
	b, _ := json.Marshal(s)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

// NewSchedule plans faults over a run of dur. Node faults run one at a
// time on one lane, cycling through the chosen kinds in a seeded shuffled
// order; client pauses run on a second lane alongside. The same arguments
// always give the same schedule.
func NewSchedule(seed uint64, dur time.Duration, kinds []string, nodes, workers int, ttl time.Duration) Schedule {
	r := rand.New(rand.NewPCG(seed, 0x7e5e1e))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	var nodeKinds []string
	clientPauses := false
	for _, k := range kinds {
		if k == FaultPauseClient {
			clientPauses = true
		} else {
			nodeKinds = append(nodeKinds, k)
		}
	}
	var s Schedule
	start, stop := 3*time.Second, dur-4*time.Second
	if len(nodeKinds) > 0 {
		var bag []string
		for t := start; t < stop; {
			if len(bag) == 0 {
				bag = append([]string(nil), nodeKinds...)
				r.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
			}
			f := Fault{At: t, Kind: bag[0], Target: -1}
			bag = bag[1:]
			if r.IntN(2) == 0 {
				f.Target = r.IntN(nodes)
			}
			switch f.Kind {
			case FaultTransfer:
				f.Target = r.IntN(nodes) // the node to hand leadership to
			case FaultPause:
				f.Dur = between(ttl+ttl/4, 2*ttl)
			case FaultClock:
				f.Dur = between(2*ttl, 3*ttl)
				f.Rate = ClockRates[r.IntN(len(ClockRates))]
			case FaultFlap:
				f.Dur = between(ttl, 2*ttl)
				f.Gap = between(100*time.Millisecond, 300*time.Millisecond)
			case FaultSnapshot, FaultDamaged:
				f.Dur = 0 // as long as it takes
			case FaultMember, FaultRestartAll:
				f.Dur = between(ttl/2, ttl)
			default:
				f.Dur = between(ttl, 2*ttl)
			}
			if t+f.Dur > stop {
				break
			}
			s = append(s, f)
			t += f.Dur + between(time.Second, 2*time.Second)
		}
	}
	if clientPauses && workers > 0 {
		for t := start; ; {
			f := Fault{At: t, Kind: FaultPauseClient, Target: r.IntN(workers), Dur: between(ttl+ttl/4, 2*ttl)}
			if t+f.Dur > stop {
				break
			}
			s = append(s, f)
			t += f.Dur + between(500*time.Millisecond, 1500*time.Millisecond)
		}
	}
	return s
}

// Nemesis carries out a schedule against a cluster and the workers.
type Nemesis struct {
	C       *Cluster
	Workers *WorkerSet
	Log     func(format string, args ...any)

	mu       sync.Mutex
	Injected map[string]int
	// Violations are what the faults themselves found wrong
	// (damaged-dir-refused).
	Violations []Violation
	// Snapshots counts restarts after which the node installed a snapshot
	// from the leader (snapshot fault).
	Snapshots int
	Skipped   map[string]int
	// Unrestored lists the member faults that could not restore the
	// cluster (a node removed and not re-added as a voter in time).
	Unrestored []string
	// Pauses lists, per worker, when its process was stopped.
	Pauses map[int][]Interval
	// powerLosses counts power-loss faults, which take turns at their
	// variants (powerloss.go).
	powerLosses int
}

func (n *Nemesis) count(kind string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.Injected == nil {
		n.Injected, n.Skipped = map[string]int{}, map[string]int{}
	}
	if ok {
		n.Injected[kind]++
	} else {
		n.Skipped[kind]++
	}
}

// Run carries out s, measured from start, until ctx ends; then it heals
// everything.
func (n *Nemesis) Run(ctx context.Context, start time.Time, s Schedule) {
	var wg sync.WaitGroup
	var nodeLane, clientLane Schedule
	for _, f := range s {
		if f.Kind == FaultPauseClient {
			clientLane = append(clientLane, f)
		} else {
			nodeLane = append(nodeLane, f)
		}
	}
	for _, lane := range []Schedule{nodeLane, clientLane} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, f := range lane {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(f.At))):
				}
				n.inject(ctx, f)
			}
		}()
	}
	wg.Wait()
	n.HealAll()
}

func (n *Nemesis) target(ctx context.Context, f Fault) (int, bool) {
	if f.Target >= 0 {
		return f.Target, true
	}
	return n.C.Leader(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (n *Nemesis) inject(ctx context.Context, f Fault) {
	if f.Kind == FaultPauseClient {
		from := now()
		if !n.Workers.Signal(f.Target, syscall.SIGSTOP) {
			n.count(f.Kind, false)
			return
		}
		n.count(f.Kind, true)
		n.Log("fault %s", f)
		sleepCtx(ctx, f.Dur)
		n.Workers.Signal(f.Target, syscall.SIGCONT)
		n.mu.Lock()
		if n.Pauses == nil {
			n.Pauses = map[int][]Interval{}
		}
		n.Pauses[f.Target] = append(n.Pauses[f.Target], Interval{From: from, To: now()})
		n.mu.Unlock()
		return
	}
	if f.Kind == FaultTransfer {
		cl, err := n.C.Client()
		if err == nil {
			// A transfer fails while an election or catch-up is under way:
			// retry for a few seconds, moving on to the next node when the
			// target leads already or refuses.
			deadline := time.Now().Add(6 * time.Second)
			for attempt := 0; ; attempt++ {
				to := n.C.Nodes[(f.Target+attempt)%len(n.C.Nodes)]
				if l, ok := n.C.Leader(ctx); ok && l == to.Index {
					to = n.C.Nodes[(to.Index+1)%len(n.C.Nodes)]
				}
				tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = cl.TransferLeadership(tctx, to.ID)
				cancel()
				if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
					break
				}
				n.Log("  transfer to node %d: %v; retrying", to.Index+1, errText(err))
				sleepCtx(ctx, 500*time.Millisecond)
			}
			cl.Close()
		}
		n.count(f.Kind, err == nil)
		n.Log("fault %s: %v", f, errText(err))
		return
	}
	if f.Kind == FaultPowerLoss {
		n.Log("fault %s", f)
		n.count(f.Kind, n.powerLoss(ctx, f))
		return
	}
	switch f.Kind {
	case FaultFlap, FaultSnapshot, FaultSplit, FaultBridge, FaultMember, FaultRestartAll, FaultDamaged:
		n.Log("fault %s", f)
		ok := n.injectMore(ctx, f)
		n.count(f.Kind, ok)
		return
	}
	i, ok := n.target(ctx, f)
	if !ok {
		i = 0 // no node names a leader right now: hit the first node
	}
	n.Log("fault %s -> node %d", f, i+1)
	n.count(f.Kind, true)
	switch f.Kind {
	case FaultKill:
		n.C.Kill(i)
		sleepCtx(ctx, f.Dur)
		n.restart(i, 1)
	case FaultPause:
		n.C.Signal(i, syscall.SIGSTOP)
		sleepCtx(ctx, f.Dur)
		n.C.Signal(i, syscall.SIGCONT)
	case FaultPartition:
		n.C.Net.Isolate(i)
		sleepCtx(ctx, f.Dur)
		n.C.Net.Heal()
	case FaultClock:
		n.C.Kill(i)
		n.restart(i, f.Rate)
		// Skew matters on the leader, which stamps cluster time.
		waitFor(ctx, 5*time.Second, "the skewed node to be ready", func() bool { return nodeReady(n.C.Nodes[i].API) })
		if cl, err := n.C.Client(); err == nil {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cl.TransferLeadership(tctx, n.C.Nodes[i].ID)
			cancel()
			cl.Close()
			n.Log("  transfer to skewed node %d: %v", i+1, errText(err))
		}
		sleepCtx(ctx, f.Dur)
		n.C.Kill(i)
		n.restart(i, 1)
	}
}

func (n *Nemesis) restart(i int, rate float64) {
	if err := n.C.Start(i, rate); err != nil {
		n.Log("restart node %d: %v", i+1, err)
	}
}

// HealAll ends every fault: heals partitions, resumes paused processes and
// restarts dead nodes at the normal clock rate.
func (n *Nemesis) HealAll() {
	n.C.Net.Heal()
	for i := range n.C.Nodes {
		n.C.Signal(i, syscall.SIGCONT)
		if !n.C.Running(i) {
			n.restart(i, 1)
		}
	}
	if n.Workers != nil {
		n.Workers.ResumeAll()
	}
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return strings.SplitN(err.Error(), "\n", 2)[0]
}
