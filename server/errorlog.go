package server

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// NewErrorLog returns the http.Server's error log for logger: its lines
// (TLS handshake failures, mostly) are logged as warnings, at most burst
// of them per period. A flood, such as thousands of connections that
// never finish their handshake, leaves burst lines and then one line per
// period saying how many more were dropped.
func NewErrorLog(logger *slog.Logger, burst int, period time.Duration) *log.Logger {
	return log.New(&limitedLog{log: logger, burst: burst, period: period}, "", 0)
}

type limitedLog struct {
	log    *slog.Logger
	burst  int
	period time.Duration

	mu      sync.Mutex
	start   time.Time // of the current period
	n       int       // lines in it
	dropped int
	flush   *time.Timer
}

func (l *limitedLog) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.start) >= l.period {
		l.start, l.n = now, 0
	}
	l.n++
	if l.n > l.burst {
		l.dropped++
		if l.flush == nil {
			l.flush = time.AfterFunc(l.start.Add(l.period).Sub(now), l.report)
		}
		l.mu.Unlock()
		return len(p), nil
	}
	l.mu.Unlock()
	l.log.Warn(msg)
	return len(p), nil
}

// report logs how many lines the period dropped.
func (l *limitedLog) report() {
	l.mu.Lock()
	n := l.dropped
	l.dropped, l.flush = 0, nil
	l.mu.Unlock()
	if n > 0 {
		l.log.Warn("more HTTP server errors (TLS handshakes, bad requests) were not logged", "dropped", n, "period", l.period)
	}
}
