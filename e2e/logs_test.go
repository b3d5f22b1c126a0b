package e2e

import (
	"encoding/json"
	"testing"
)

// A normal start, join and orderly shutdown of a three-node cluster logs
// nothing at WARN or ERROR, and with --log-format json every line that
// any process writes, raft's own included, is a JSON object.
func TestCleanLogsOnJoinAndShutdown(t *testing.T) {
	for _, order := range []string{"leader first", "leader last"} {
		t.Run(order, func(t *testing.T) {
			// raft's info lines too, to see them pass through slog.
			// Calm raft timing: a loaded machine must not turn the
			// normal join and shutdown into an election (which is
			// rightly logged at WARN).
			ns := startThree(t, "--log-format", "json", "--raft-log-level", "info")
			all := ns[0].api + "," + ns[1].api + "," + ns[2].api
			acquireJSON(t, all, "jobs/x", "--holder", "a", "--ttl", "5s")
			st := waitVoters(t, all, 3)
			var stops []*server
			for _, s := range ns {
				if (s.name == st.Leader) == (order == "leader first") {
					stops = append([]*server{s}, stops...)
				} else {
					stops = append(stops, s)
				}
			}
			for _, s := range stops {
				if code := s.stop(); code != 0 {
					t.Errorf("%s exited %d after SIGTERM", s.name, code)
				}
			}
			for _, s := range ns {
				lines := s.log.lines()
				if len(lines) < 3 {
					t.Errorf("%s logged only %d lines", s.name, len(lines))
				}
				raft := 0
				for _, line := range lines {
					var rec struct {
						Level  string `json:"level"`
						Msg    string `json:"msg"`
						Logger string `json:"logger"`
					}
					if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Level == "" || rec.Msg == "" {
						t.Errorf("%s wrote a line that is not a JSON log record (%v): %s", s.name, err, line)
						continue
					}
					if rec.Logger == "raft" {
						raft++
					}
					if rec.Level == "WARN" || rec.Level == "ERROR" {
						t.Errorf("%s logged at %s in a normal join and shutdown: %s", s.name, rec.Level, line)
					}
				}
				if raft == 0 {
					t.Errorf("%s logged no line of raft's (logger=raft)", s.name)
				}
			}
		})
	}
}
