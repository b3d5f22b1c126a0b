package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/lease"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" for valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"ttl below the minimum", func(c *Config) { c.TTL = 100 * time.Millisecond }, "--ttl 100ms is too short"},
		{"ttl too long", func(c *Config) { c.TTL, c.Pause = time.Hour, 2*time.Hour }, "too long"},
		{"pause equal to ttl", func(c *Config) { c.Pause = c.TTL }, "--pause 2s must be longer than --ttl 2s"},
		{"pause shorter than ttl", func(c *Config) { c.Pause = time.Second }, "must be longer"},
		{"no scenario", func(c *Config) { c.Scenarios = nil }, "no scenario"},
		{"unknown scenario", func(c *Config) { c.Scenarios = []Scenario{"nope"} }, `unknown scenario "nope"`},
		{"twice", func(c *Config) { c.Scenarios = []Scenario{Fenced, Fenced} }, "twice"},
		{"real without a worker command", func(c *Config) { c.Real = true }, "worker command"},
		{"real failover only", func(c *Config) {
			c.Real, c.WorkerCommand, c.Scenarios = true, []string{"tenure"}, []Scenario{Failover}
		}, "failover runs in-process only"},
		{"real all", func(c *Config) { c.Real, c.WorkerCommand = true, []string{"tenure"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Stdout = io.Discard
			tc.mod(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDefaultPause(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		2 * time.Second:        3 * time.Second,
		400 * time.Millisecond: 900 * time.Millisecond,
		10 * time.Second:       15 * time.Second,
	} {
		if got := DefaultPause(ttl); got != want {
			t.Errorf("DefaultPause(%s) = %s, want %s", ttl, got, want)
		}
	}
}

func TestParseScenarios(t *testing.T) {
	for in, want := range map[string][]Scenario{
		"all":                    AllScenarios,
		"fenced":                 {Fenced},
		"failover,fenced":        {Fenced, Failover},
		" timeout-lock ,fenced ": {Fenced, TimeoutLock},
		"fenced,fenced":          {Fenced},
	} {
		got, err := ParseScenarios(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseScenarios(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "bogus", "fenced,", "all,fenced"} {
		if got, err := ParseScenarios(in); err == nil {
			t.Errorf("ParseScenarios(%q) = %v, want an error", in, got)
		}
	}
}

func TestFailedError(t *testing.T) {
	err := error(&FailedError{Failed: []Result{{Scenario: Fenced, Summary: "A's late write was accepted"}}})
	if got := err.Error(); got != "demo failed: scenario fenced: A's late write was accepted" {
		t.Fatalf("Error() = %q", got)
	}
	// It does not pass for a fencing rejection of the CLI (exit 4).
	if errors.Is(err, client.ErrStaleToken) {
		t.Fatal("FailedError matches ErrStaleToken")
	}
}

// TestJudge covers the verdicts the scenarios cannot easily be driven
// into: each wrong outcome fails with a reason.
func TestJudge(t *testing.T) {
	put := func(v, errc string, at time.Duration) Event {
		return Event{Op: "put", Value: v, Err: errc, At: at}
	}
	good := func() *pausedOutcome {
		return &pausedOutcome{
			token: map[string]uint64{"A": 1, "B": 2},
			puts: map[string][]Event{
				"A": {put(valueA1, "", 0), put(valueA2, errStale, 3*time.Second)},
				"B": {put(valueB1, "", 2*time.Second)},
			},
			final: valueB1, finalToken: 2,
		}
	}
	lost := func() *pausedOutcome {
		o := good()
		o.puts["A"][1].Err = ""
		o.final, o.finalToken = valueA2, 0
		return o
	}
	for _, tc := range []struct {
		name string
		sc   Scenario
		o    *pausedOutcome
		pass bool
		want string
	}{
		{"fenced as expected", Fenced, good(), true, "rejected A's late write with token 1"},
		{"timeout-lock as expected", TimeoutLock, lost(), true, "LOST UPDATE"},
		{"fenced, late write accepted", Fenced, lost(), false, "A's late write was accepted"},
		{"timeout-lock, late write rejected", TimeoutLock, good(), false, "A's late write failed"},
		{"worker failed", Fenced, func() *pausedOutcome { o := good(); o.failure = "worker B failed: boom"; return o }(), false, "boom"},
		{"no grant for B", Fenced, func() *pausedOutcome { o := good(); delete(o.token, "B"); return o }(), false, "B was not granted"},
		{"token not larger", Fenced, func() *pausedOutcome { o := good(); o.token["B"] = 1; return o }(), false, "not larger"},
		{"late write of A before B's", TimeoutLock, func() *pausedOutcome {
			o := lost()
			o.puts["A"][1].At = time.Second
			return o
		}(), false, "give --pause more room"},
		{"fenced, wrong final value", Fenced, func() *pausedOutcome { o := good(); o.final = "x"; return o }(), false, `final value is "x"`},
		{"other failure of the late write", Fenced, func() *pausedOutcome {
			o := good()
			o.puts["A"][1].Err, o.puts["A"][1].Outcome = errIndeterminate, "failed: maybe"
			return o
		}(), false, "want a stale-token rejection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, summary := tc.o.judge(tc.sc)
			if pass != tc.pass || !strings.Contains(summary, tc.want) {
				t.Fatalf("judge = %v, %q; want %v and %q", pass, summary, tc.pass, tc.want)
			}
		})
	}
}

func TestErrCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("put: %w", &lease.StaleError{Name: "x", Token: 1}), errStale},
		{&lease.HeldError{Name: "x", Holder: "a"}, errHeld},
		{fmt.Errorf("%w: boom", client.ErrIndeterminate), errIndeterminate},
		{context.DeadlineExceeded, errOther},
	} {
		if got := errCode(tc.err); got != tc.want {
			t.Errorf("errCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
