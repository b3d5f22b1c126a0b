package node

import "testing"

// TestJudgeProgress: a follower is behind until it has applied the first
// commit index a leader sent it since it started (its own last index
// stands in before one came), and afterwards while it trails the highest
// one by more than catchUpSlack entries; without a leader it is not
// behind anyone.
func TestJudgeProgress(t *testing.T) {
	var p progress
	steps := []struct {
		what                  string
		saw                   uint64 // a commit index a leader sends first; 0: none
		applied, commit, last uint64
		follows               bool
		wantBehind            bool
		wantLeaderCommit      uint64
	}{
		{what: "started, no leader known", applied: 0, last: 500, wantLeaderCommit: 500},
		{what: "a leader known, no commit index from it yet", applied: 0, last: 500, follows: true, wantBehind: true, wantLeaderCommit: 500},
		{what: "the leader's first commit index", saw: 520, applied: 0, last: 500, follows: true, wantBehind: true, wantLeaderCommit: 520},
		{what: "within the slack of it, but not there", applied: 519, commit: 519, last: 520, follows: true, wantBehind: true, wantLeaderCommit: 520},
		{what: "there: caught up since the start", applied: 520, commit: 520, last: 520, follows: true, wantLeaderCommit: 520},
		{what: "trailing by the slack", saw: 520 + catchUpSlack, applied: 520, commit: 520, last: 600, follows: true, wantLeaderCommit: 520 + catchUpSlack},
		{what: "trailing by more", saw: 521 + catchUpSlack, applied: 520, commit: 520, last: 600, follows: true, wantBehind: true, wantLeaderCommit: 521 + catchUpSlack},
		{what: "a new leader sends a lower commit index: the highest counts", saw: 530, applied: 520, commit: 530, last: 600, follows: true, wantBehind: true, wantLeaderCommit: 521 + catchUpSlack},
		{what: "no leader", applied: 520, commit: 530, last: 600, wantLeaderCommit: 521 + catchUpSlack},
		{what: "caught up again", applied: 600, commit: 600, last: 600, follows: true, wantLeaderCommit: 600},
	}
	for _, s := range steps {
		if s.saw != 0 {
			p.saw(s.saw)
		}
		got := p.judge(s.applied, s.commit, s.last, s.follows)
		if got.Behind != s.wantBehind || got.LeaderCommit != s.wantLeaderCommit || got.Applied != s.applied {
			t.Errorf("%s: %+v, want behind %v, leader commit %d", s.what, got, s.wantBehind, s.wantLeaderCommit)
		}
	}
}
