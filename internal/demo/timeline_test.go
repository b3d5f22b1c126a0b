package demo

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step on every reading, so event times are known.
func fakeClock(step time.Duration) func() time.Time {
	now := time.Unix(1000, 0)
	return func() time.Time {
		now = now.Add(step)
		return now
	}
}

func sampleTimeline(tl *timeline) {
	tl.now = fakeClock(250 * time.Millisecond)
	tl.intro([]string{"tenure demo: test"}, map[string]any{"mode": "test"})
	tl.begin(Fenced, 1, 1)
	tl.record(Event{Actor: "A", Op: "acquire", Text: "acquire demo/fenced, ttl 2s", Token: 7, Outcome: "granted", Tone: ToneGood})
	tl.record(Event{Actor: "A", Op: "put", Text: `put report = "A-2"`, Value: "A-2", Token: 7,
		Outcome: "REJECTED: stale token", Err: errStale, Tone: ToneFenced})
	tl.record(Event{Actor: "check", Op: "read", Text: "read report", Outcome: "LOST UPDATE: B's write was overwritten", Tone: ToneBad})
	r := Result{Scenario: Fenced, Passed: true, Summary: "fine.", Elapsed: time.Second}
	tl.result(r)
	tl.summary([]Result{r}, nil, 2*time.Second)
}

func TestTextTimeline(t *testing.T) {
	var plain bytes.Buffer
	sampleTimeline(newTimeline(&plain, Text, false))
	out := plain.String()
	t.Logf("plain:\n%s", out)
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("plain output has ANSI escapes:\n%q", out)
	}
	for _, want := range []string{
		"Scenario 1 of 1: fenced lease",
		"TIME  ACTOR    EVENT",
		"  0.250s  A        acquire demo/fenced, ttl 2s",
		"    7  REJECTED: stale token",
		"LOST UPDATE: B's write was overwritten",
		"✓ as expected: fine.",
		"The scenario behaved as expected (2.000s).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plain output lacks %q", want)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, " ") {
			t.Errorf("line %q has trailing spaces", l)
		}
	}

	var col bytes.Buffer
	sampleTimeline(newTimeline(&col, Text, true))
	if !strings.Contains(col.String(), toneColour[ToneFenced]+"REJECTED: stale token"+ansiReset) {
		t.Fatalf("coloured output does not colour the rejection:\n%q", col.String())
	}
	// Without the escapes the coloured output is the plain one.
	stripped := col.String()
	for _, esc := range append(toneColour[1:], ansiBold, ansiDim, ansiReset) {
		stripped = strings.ReplaceAll(stripped, esc, "")
	}
	if stripped != out {
		t.Fatalf("coloured output differs from plain beyond the escapes:\n%s\nvs\n%s", stripped, out)
	}
}

func TestJSONTimeline(t *testing.T) {
	var buf bytes.Buffer
	// Colour is ignored for JSON.
	sampleTimeline(newTimeline(&buf, JSON, true))
	if strings.Contains(buf.String(), "\x1b[") {
		t.Fatalf("JSON output has ANSI escapes")
	}
	objs := jsonLines(t, buf.String())
	var gotTypes []string
	for _, o := range objs {
		gotTypes = append(gotTypes, o["type"].(string))
	}
	wantTypes := []string{"demo", "scenario", "event", "event", "event", "result", "summary"}
	if !reflect.DeepEqual(gotTypes, wantTypes) {
		t.Fatalf("types %v, want %v", gotTypes, wantTypes)
	}
	rej := objs[3]
	want := map[string]any{"type": "event", "scenario": "fenced", "time": "500ms", "actor": "A", "op": "put",
		"event": `put report = "A-2"`, "value": "A-2", "token": float64(7), "outcome": "REJECTED: stale token",
		"error": "stale_token", "tone": "fenced"}
	if !reflect.DeepEqual(rej, want) {
		t.Fatalf("rejection line\n got %v\nwant %v", rej, want)
	}
	if s := objs[6]; s["passed"] != true || s["elapsed"] != "2s" || len(s["failed"].([]any)) != 0 {
		t.Fatalf("summary %v", s)
	}
}

// A worker's JSON line carries an event to the demo unchanged.
func TestEventJSONRoundTrip(t *testing.T) {
	e := Event{Actor: "A", Op: "put", Text: `put report = "A-2"`, Value: "A-2", Token: 9,
		Outcome: "REJECTED: stale token", Err: errStale, Tone: ToneFenced}
	b, err := json.Marshal(e.toJSON())
	if err != nil {
		t.Fatal(err)
	}
	var j eventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if got := j.event(); got != e {
		t.Fatalf("round trip of %s:\n got %+v\nwant %+v", b, got, e)
	}
}

func TestUseColour(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		env  func(string) string
	}{
		{"buffer", &bytes.Buffer{}, env()},
		{"regular file", f, env()},
		{"NO_COLOR", f, env("NO_COLOR", "1")},
		{"dumb terminal", f, env("TERM", "dumb")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if UseColour(tc.w, tc.env) {
				t.Fatal("colour on, want off")
			}
		})
	}
}
