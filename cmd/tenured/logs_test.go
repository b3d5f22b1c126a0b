package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestJSONLogDurations: with --log-format json every duration is written
// as the text logs write it ("400ms"), not as nanoseconds (400000000):
// a line with a number that is a duration in disguise fails, and so does
// one that is not JSON.
func TestJSONLogDurations(t *testing.T) {
	log := runUntilLeading(t, "--dev", "--log-format", "json", "--log-level", "debug", "--raft-log-level", "debug",
		"--election-timeout", "200ms")
	durations, minTTL := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		for k, v := range flatten("", rec) {
			switch v := v.(type) {
			case float64:
				// A fresh node logs no count, index or term this
				// large; a duration of a millisecond or more in
				// nanoseconds is.
				if v >= 1e6 {
					t.Errorf("%s is %v, a number that looks like nanoseconds, in %s", k, v, line)
				}
			case string:
				if d, err := time.ParseDuration(v); err == nil && d > 0 && strings.ContainsAny(v, "smhµn") {
					durations++
				}
			}
		}
		if v, ok := rec["min_ttl"]; ok {
			minTTL++
			if s, _ := v.(string); s != "2s" {
				t.Errorf(`min_ttl is %v, want "2s" (the default) in %s`, v, line)
			}
		}
	}
	if minTTL == 0 || durations == 0 {
		t.Errorf("the log names no duration as text, min_ttl included:\n%s", log)
	}
}

// flatten returns the values of rec and of the groups in it by their
// dotted keys.
func flatten(prefix string, rec map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range rec {
		if g, ok := v.(map[string]any); ok {
			for gk, gv := range flatten(prefix+k+".", g) {
				out[gk] = gv
			}
			continue
		}
		out[prefix+k] = v
	}
	return out
}
