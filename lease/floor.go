package lease

import "fmt"

// MaxTokenFloor is the highest token floor RaiseTokenFloor accepts: 2^53,
// so that tokens stay exact wherever they travel as a double (JSON
// numbers in JavaScript) and far below the end of a signed 64-bit
// column (Postgres bigint). A floor from the clock in microseconds
// reaches it in the year 2255.
const MaxTokenFloor = 1 << 53

// RaiseTokenFloor makes the next grant's token at least floor: the token
// counter is raised to floor-1 unless it is there already. It never
// lowers the counter, so the next token is always at least
// max(floor, LastToken()+1), and it reports that token. The counter is
// in every snapshot, so a raised floor survives snapshots and restarts.
//
// A cluster restored from a backup, or forced into a new cluster from a
// survivor, cannot know the tokens granted after its data was taken;
// node raises the floor in the state such a cluster starts from, before
// anything is granted (see docs/operations.md). A floor above
// MaxTokenFloor is refused (ErrInvalid) and changes nothing.
func (s *State) RaiseTokenFloor(floor uint64) (next uint64, err error) {
	if floor > MaxTokenFloor {
		return s.lastToken + 1, fmt.Errorf("%w: token floor %d is above the maximum %d", ErrInvalid, floor, uint64(MaxTokenFloor))
	}
	if floor > 0 && floor-1 > s.lastToken {
		s.lastToken = floor - 1
	}
	return s.lastToken + 1, nil
}
