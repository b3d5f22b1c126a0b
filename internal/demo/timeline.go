package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tone says how an event's outcome is shown: the colour on a terminal, and
// the "tone" field of a JSON line.
type Tone uint8

// The tones.
const (
	ToneNone   Tone = iota
	ToneGood        // granted, accepted, expected outcome (green)
	ToneWait        // queued, paused, frozen, crashed (yellow)
	ToneFenced      // a write refused by fencing (magenta)
	ToneBad         // data lost, unexpected outcome (red)
)

var toneNames = [...]string{ToneNone: "", ToneGood: "good", ToneWait: "wait", ToneFenced: "fenced", ToneBad: "bad"}

func (t Tone) String() string {
	if int(t) < len(toneNames) {
		return toneNames[t]
	}
	return ""
}

func parseTone(s string) Tone {
	for i, n := range toneNames {
		if n == s {
			return Tone(i)
		}
	}
	return ToneNone
}

// ANSI escapes, used only when the output is a terminal.
var toneColour = [...]string{
	ToneGood:   "\x1b[32m",
	ToneWait:   "\x1b[33m",
	ToneFenced: "\x1b[1;35m",
	ToneBad:    "\x1b[1;31m",
}

const (
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m"
	ansiReset = "\x1b[0m"
)

// Event is one line of the timeline.
type Event struct {
	// Scenario and At are set by the timeline when it records the event:
	// the scenario's name and the time since the scenario began.
	Scenario string
	At       time.Duration
	// Actor is who acted: A, B, C (workers), cluster, demo or check.
	Actor string
	// Op is the kind of event, for machines and for the scenario checks.
	// Workers: acquire, queue (waiting for a held lease), put, pause,
	// wake, work, release, renew, renew-retry (an attempt that failed for
	// want of a cluster). The demo: freeze, resume (SIGSTOP, SIGCONT).
	// The cluster: start, expired, crash, elected. Checks: read.
	Op string
	// Text says what happened, for people.
	Text string
	// Value is the value written or read, if any.
	Value string
	// Token is the fencing token involved; 0 for none.
	Token uint64
	// Outcome is the short result: granted, ok, queued, REJECTED ...
	Outcome string
	// Err is set when the action failed: stale_token, lease_held,
	// indeterminate or error.
	Err string
	// Tone colours the outcome.
	Tone Tone
}

// eventJSON is an Event as a JSON line (-o json, and the lines a worker
// process reports to the demo). Time is a Go duration string.
type eventJSON struct {
	Type     string `json:"type"`
	Scenario string `json:"scenario,omitempty"`
	Time     string `json:"time,omitempty"`
	Actor    string `json:"actor"`
	Op       string `json:"op,omitempty"`
	Event    string `json:"event"`
	Value    string `json:"value,omitempty"`
	Token    uint64 `json:"token,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Error    string `json:"error,omitempty"`
	Tone     string `json:"tone,omitempty"`
}

func (e Event) toJSON() eventJSON {
	out := eventJSON{
		Type: "event", Scenario: e.Scenario, Actor: e.Actor, Op: e.Op, Event: e.Text,
		Value: e.Value, Token: e.Token, Outcome: e.Outcome, Error: e.Err, Tone: e.Tone.String(),
	}
	if e.Scenario != "" {
		out.Time = fmtDuration(e.At)
	}
	return out
}

func (j eventJSON) event() Event {
	e := Event{Scenario: j.Scenario, Actor: j.Actor, Op: j.Op, Text: j.Event, Value: j.Value,
		Token: j.Token, Outcome: j.Outcome, Err: j.Error, Tone: parseTone(j.Tone)}
	if d, err := time.ParseDuration(j.Time); err == nil {
		e.At = d
	}
	return e
}

// Format is the output format of the timeline.
type Format uint8

// The formats.
const (
	// Text is a table for people, coloured if Config.Colour is set.
	Text Format = iota
	// JSON is one JSON object per line; see the package documentation.
	JSON
)

// UseColour reports whether output to w should be coloured: only when w is
// a terminal and NO_COLOR is unset or empty (https://no-color.org), and
// TERM is not "dumb".
func UseColour(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" || getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Column widths of the text timeline.
const (
	timeWidth  = 8
	actorWidth = 7
	textWidth  = 46
	tokenWidth = 5
)

// timeline prints events as they are recorded: a table or JSON lines.
// It is safe for concurrent use.
type timeline struct {
	mu       sync.Mutex
	w        io.Writer
	format   Format
	colour   bool
	scenario string
	start    time.Time
	now      func() time.Time
}

func newTimeline(w io.Writer, format Format, colour bool) *timeline {
	return &timeline{w: w, format: format, colour: colour && format == Text, now: time.Now}
}

func (t *timeline) paint(code, s string) string {
	if !t.colour || code == "" || s == "" {
		return s
	}
	return code + s + ansiReset
}

func (t *timeline) writeJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the demo's own structs are marshalled: a failure is a bug.
		panic(fmt.Sprintf("demo: marshal %T: %v", v, err))
	}
	fmt.Fprintf(t.w, "%s\n", b)
}

// intro prints the lines that open the demo; fields go to the JSON line.
func (t *timeline) intro(lines []string, fields map[string]any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.format == JSON {
		obj := map[string]any{"type": "demo"}
		for k, v := range fields {
			obj[k] = v
		}
		t.writeJSON(obj)
		return
	}
	for i, l := range lines {
		if i == 0 {
			l = t.paint(ansiBold, l)
		}
		fmt.Fprintln(t.w, l)
	}
}

// begin starts a scenario: it prints its heading, its about lines and
// extra, and restarts the clock.
func (t *timeline) begin(sc Scenario, n, of int, extra ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.scenario = string(sc)
	t.start = t.now()
	info := scenarioInfo[sc]
	if t.format == JSON {
		t.writeJSON(map[string]any{"type": "scenario", "scenario": sc, "title": info.title, "number": n, "of": of})
		return
	}
	fmt.Fprintf(t.w, "\n%s\n", t.paint(ansiBold, fmt.Sprintf("Scenario %d of %d: %s", n, of, info.title)))
	for _, l := range append(info.about[:len(info.about):len(info.about)], extra...) {
		fmt.Fprintf(t.w, "  %s\n", l)
	}
	fmt.Fprintf(t.w, "\n%s\n", t.paint(ansiDim, strings.TrimRight(fmt.Sprintf("  %*s  %-*s  %-*s  %*s  %s",
		timeWidth, "TIME", actorWidth, "ACTOR", textWidth, "EVENT", tokenWidth, "TOKEN", "OUTCOME"), " ")))
}

// record stamps e with the scenario and the time since it began, prints
// it, and returns it.
func (t *timeline) record(e Event) Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.Scenario = t.scenario
	e.At = t.now().Sub(t.start)
	if t.format == JSON {
		t.writeJSON(e.toJSON())
		return e
	}
	tok := ""
	if e.Token > 0 {
		tok = strconv.FormatUint(e.Token, 10)
	}
	text := e.Text
	if pad := textWidth - len([]rune(text)); pad > 0 {
		text += strings.Repeat(" ", pad)
	}
	outcome := e.Outcome
	if int(e.Tone) < len(toneColour) {
		outcome = t.paint(toneColour[e.Tone], outcome)
	}
	line := fmt.Sprintf("  %*s  %-*s  %s  %*s  %s", timeWidth, fmtAt(e.At), actorWidth, e.Actor, text, tokenWidth, tok, outcome)
	fmt.Fprintln(t.w, strings.TrimRight(line, " "))
	return e
}

// result prints the verdict of a scenario.
func (t *timeline) result(r Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.format == JSON {
		t.writeJSON(map[string]any{"type": "result", "scenario": r.Scenario, "passed": r.Passed,
			"summary": r.Summary, "elapsed": fmtDuration(r.Elapsed)})
		return
	}
	mark, tone := "✓ as expected:", ToneGood
	if !r.Passed {
		mark, tone = "✗ NOT as expected:", ToneBad
	}
	fmt.Fprintf(t.w, "  %s %s\n", t.paint(toneColour[tone], mark), r.Summary)
}

// note prints a line outside any scenario's table (a skipped scenario).
func (t *timeline) note(scenario Scenario, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.format == JSON {
		t.writeJSON(map[string]any{"type": "note", "scenario": scenario, "text": text})
		return
	}
	fmt.Fprintf(t.w, "\n%s\n", text)
}

// summary prints the last line: how many scenarios behaved as expected.
func (t *timeline) summary(results []Result, skipped []Scenario, elapsed time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var failed []string
	for _, r := range results {
		if !r.Passed {
			failed = append(failed, string(r.Scenario))
		}
	}
	if t.format == JSON {
		if failed == nil {
			failed = []string{}
		}
		sk := make([]string, 0, len(skipped))
		for _, s := range skipped {
			sk = append(sk, string(s))
		}
		t.writeJSON(map[string]any{"type": "summary", "passed": len(failed) == 0 && len(results) > 0,
			"scenarios": len(results), "failed": failed, "skipped": sk, "elapsed": fmtDuration(elapsed)})
		return
	}
	var line string
	switch {
	case len(results) == 0:
		names := make([]string, len(skipped))
		for i, s := range skipped {
			names[i] = string(s)
		}
		line = t.paint(toneColour[ToneWait], fmt.Sprintf("No scenario ran: %s skipped (%s).", strings.Join(names, ", "), fmtAt(elapsed)))
	case len(failed) == 0 && len(results) == 1:
		line = t.paint(toneColour[ToneGood], fmt.Sprintf("The scenario behaved as expected (%s).", fmtAt(elapsed)))
	case len(failed) == 0:
		line = t.paint(toneColour[ToneGood], fmt.Sprintf("All %d scenarios behaved as expected (%s).", len(results), fmtAt(elapsed)))
	default:
		line = t.paint(toneColour[ToneBad], fmt.Sprintf("%d of %d scenarios did NOT behave as expected: %s (%s).",
			len(failed), len(results), strings.Join(failed, ", "), fmtAt(elapsed)))
	}
	fmt.Fprintf(t.w, "\n%s\n", line)
}

// fmtAt formats a time since start for the table: seconds, 3 decimals.
func fmtAt(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// fmtDuration rounds d to the millisecond: 2.004s, 3s, 250ms.
func fmtDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}
