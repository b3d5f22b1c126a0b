package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// floorResult is the latency floor of this machine: what one commit on
// three nodes cannot go below, from its parts measured alone.
type floorResult struct {
	// FsyncP50Us is the median time of appending 64 bytes to a file in
	// the work directory and calling fdatasync, in microseconds.
	FsyncP50Us float64 `json:"fdatasync_p50_us"`
	FsyncP99Us float64 `json:"fdatasync_p99_us"`
	// RTTP50Us is the median round trip of 64 bytes over a loopback TCP
	// connection (write, echoed back by a goroutine of this process), in
	// microseconds.
	RTTP50Us float64   `json:"loopback_rtt_p50_us"`
	RTTP99Us float64   `json:"loopback_rtt_p99_us"`
	Samples  int       `json:"samples"`
	Idle     idleCheck `json:"idle"`
	// CommitUs is one commit on three nodes: the client's request to the
	// leader and its answer (one round trip), the leader's append to a
	// follower and its acknowledgement (one round trip), and one
	// fdatasync (the follower's, before it acknowledges; the leader's
	// runs at the same time): FsyncP50Us + 2*RTTP50Us.
	CommitUs float64 `json:"commit_floor_us"`
	// CycleMs is a lock cycle (acquire, fenced write, release: three
	// commits one after the other) at the floor: 3*CommitUs, in ms.
	CycleMs float64 `json:"lock_cycle_floor_ms"`
}

// floorSamples is how many fdatasyncs and round trips are timed.
const floorSamples = 200

// measureFloor times floorSamples appends with fdatasync in dir and as
// many loopback round trips.
func measureFloor(ctx context.Context, dir string) (floorResult, error) {
	var r floorResult
	fs, err := timeFsync(ctx, dir, floorSamples)
	if err != nil {
		return r, fmt.Errorf("fdatasync: %w", err)
	}
	rt, err := timeLoopback(ctx, floorSamples)
	if err != nil {
		return r, fmt.Errorf("loopback: %w", err)
	}
	r.Samples = floorSamples
	r.FsyncP50Us, r.FsyncP99Us = us(percentile(fs, 0.5)), us(percentile(fs, 0.99))
	r.RTTP50Us, r.RTTP99Us = us(percentile(rt, 0.5)), us(percentile(rt, 0.99))
	r.CommitUs = r.FsyncP50Us + 2*r.RTTP50Us
	r.CycleMs = 3 * r.CommitUs / 1000
	return r, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// timeFsync appends 64 bytes to a new file in dir and fdatasyncs it, n
// times, as a log does, and returns each append+sync's duration.
func timeFsync(ctx context.Context, dir string, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "floor-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 64)
	out := make([]time.Duration, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// timeLoopback sends 64 bytes over a loopback TCP connection to an echo
// goroutine and reads them back, n times.
func timeLoopback(ctx context.Context, n int) ([]time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	buf := make([]byte, 64)
	out := make([]time.Duration, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}
