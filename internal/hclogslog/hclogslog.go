// Package hclogslog is an hclog.Logger that writes to a log/slog logger,
// so that libraries logging with hclog (hashicorp/raft) log in the
// program's own format and levels: with tenured --log-format json, every
// line is JSON.
package hclogslog

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is the slog level of hclog's Trace: below Debug.
const LevelTrace = slog.LevelDebug - 4

// Options configures a Logger.
type Options struct {
	// Name is the logger's name, logged as the attribute "logger"
	// (sub-loggers append ".sub").
	Name string
	// Level is the lowest hclog level passed on; lower ones are dropped
	// before slog sees them. Default hclog.Info.
	Level hclog.Level
	// Adjust, if set, may change the level of a message before it is
	// logged (for messages a library logs too loudly); it returns the
	// level to log at, or hclog.Off to drop the message.
	Adjust func(level hclog.Level, msg string, args []any) hclog.Level
}

// Logger is an hclog.Logger over a *slog.Logger.
type Logger struct {
	log     *slog.Logger
	name    string
	level   *atomic.Int32
	implied []any
	adjust  func(hclog.Level, string, []any) hclog.Level
}

var _ hclog.Logger = (*Logger)(nil)

// New returns a Logger that writes to l.
func New(l *slog.Logger, o Options) *Logger {
	if o.Level == hclog.NoLevel {
		o.Level = hclog.Info
	}
	lv := &atomic.Int32{}
	lv.Store(int32(o.Level))
	return &Logger{log: l, name: o.Name, level: lv, adjust: o.Adjust}
}

// slogLevel maps an hclog level to a slog level.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Log logs msg at level with args, alternating keys and values.
func (l *Logger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if level == hclog.Off || level < l.GetLevel() {
		return
	}
	if l.adjust != nil {
		if level = l.adjust(level, msg, args); level == hclog.Off {
			return
		}
	}
	ctx := context.Background()
	sl := slogLevel(level)
	if !l.log.Enabled(ctx, sl) {
		return
	}
	attrs := make([]slog.Attr, 0, 1+(len(l.implied)+len(args))/2)
	if l.name != "" {
		attrs = append(attrs, slog.String("logger", l.name))
	}
	attrs = appendArgs(attrs, l.implied)
	attrs = appendArgs(attrs, args)
	l.log.LogAttrs(ctx, sl, msg, attrs...)
}

// appendArgs appends hclog's alternating keys and values as attributes.
// Values that are not plain data are logged as text, as hclog prints
// them, so the JSON handler does not expand a library's structs.
func appendArgs(attrs []slog.Attr, args []any) []slog.Attr {
	for i := 0; i < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		if i+1 == len(args) {
			attrs = append(attrs, slog.String("EXTRA_VALUE_AT_END", key))
			break
		}
		attrs = append(attrs, slog.Any(key, value(args[i+1])))
	}
	return attrs
}

func value(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
		float32, float64, slog.LogValuer:
		return x
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	case hclog.Format:
		return fmt.Sprintf(fmt.Sprint(x[0]), x[1:]...)
	}
	return fmt.Sprintf("%+v", v)
}

func (l *Logger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *Logger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *Logger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *Logger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *Logger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *Logger) enabled(level hclog.Level) bool {
	return level >= l.GetLevel() && l.log.Enabled(context.Background(), slogLevel(level))
}

func (l *Logger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *Logger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *Logger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *Logger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *Logger) IsError() bool { return l.enabled(hclog.Error) }

// ImpliedArgs returns the arguments added with With.
func (l *Logger) ImpliedArgs() []any { return l.implied }

// With returns a logger that adds args to every message.
func (l *Logger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	return &c
}

// Name returns the logger's name.
func (l *Logger) Name() string { return l.name }

// Named returns a sub-logger named "name.sub".
func (l *Logger) Named(name string) hclog.Logger {
	c := *l
	if l.name != "" {
		name = l.name + "." + name
	}
	c.name = name
	return &c
}

// ResetNamed returns a logger with the name name.
func (l *Logger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

// SetLevel sets the lowest level passed on, for this logger and those
// made from it.
func (l *Logger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }

// GetLevel returns the lowest level passed on.
func (l *Logger) GetLevel() hclog.Level { return hclog.Level(l.level.Load()) }

// StandardLogger returns a *log.Logger that writes to this logger.
func (l *Logger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer whose lines are logged by this logger;
// with opts.InferLevels, a line starting "[WARN]" or the like is logged
// at that level.
func (l *Logger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	infer := opts != nil && opts.InferLevels
	return writer{l: l, infer: infer}
}

type writer struct {
	l     *Logger
	infer bool
}

func (w writer) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		level := hclog.Info
		if w.infer {
			level, line = inferLevel(line)
		}
		w.l.Log(level, line)
	}
	return len(p), nil
}

func inferLevel(line string) (hclog.Level, string) {
	for _, p := range []struct {
		prefix string
		level  hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error},
	} {
		if rest, ok := strings.CutPrefix(line, p.prefix); ok {
			return p.level, strings.TrimSpace(rest)
		}
	}
	return hclog.Info, line
}
