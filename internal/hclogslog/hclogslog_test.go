package hclogslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

type server struct{ ID, Address string }

func TestLevelsAndJSON(t *testing.T) {
	var buf bytes.Buffer
	sl := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: LevelTrace}))
	l := New(sl, Options{Name: "raft", Level: hclog.Trace})
	l.Trace("t")
	l.Debug("d")
	l.Info("i", "peer", server{"n1", "a:1"})
	l.Named("snap").Warn("w", "error", errors.New("boom"))
	l.With("term", 3).Error("e", "odd")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[WARN] from a std logger")
	want := []struct{ level, msg, logger string }{
		{"DEBUG-4", "t", "raft"}, {"DEBUG", "d", "raft"}, {"INFO", "i", "raft"},
		{"WARN", "w", "raft.snap"}, {"ERROR", "e", "raft"}, {"WARN", "from a std logger", "raft"},
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %s", i, line)
		}
		if rec["level"] != want[i].level || rec["msg"] != want[i].msg || rec["logger"] != want[i].logger {
			t.Errorf("line %d = %s, want level %s msg %s logger %s", i, line, want[i].level, want[i].msg, want[i].logger)
		}
	}
	for _, frag := range []string{`"peer":"{ID:n1 Address:a:1}"`, `"error":"boom"`, `"term":3`, `"EXTRA_VALUE_AT_END":"odd"`} {
		if !strings.Contains(buf.String(), frag) {
			t.Errorf("output lacks %s:\n%s", frag, buf.String())
		}
	}
}

func TestLevelFilterAndAdjust(t *testing.T) {
	var buf bytes.Buffer
	sl := slog.New(slog.NewTextHandler(&buf, nil)) // info and above
	l := New(sl, Options{Level: hclog.Warn, Adjust: func(level hclog.Level, msg string, _ []any) hclog.Level {
		switch msg {
		case "quiet":
			return hclog.Debug
		case "drop":
			return hclog.Off
		}
		return level
	}})
	l.Info("below the hclog level")
	l.Warn("quiet")
	l.Error("drop")
	l.Warn("kept")
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "msg=kept") {
		t.Errorf("output:\n%s", got)
	}
	if l.IsInfo() || !l.IsWarn() {
		t.Errorf("IsInfo %v, IsWarn %v at level warn", l.IsInfo(), l.IsWarn())
	}
}
