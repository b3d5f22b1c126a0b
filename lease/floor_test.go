package lease

import (
	"bytes"
	"errors"
	"testing"
)

func TestRaiseTokenFloor(t *testing.T) {
	tests := []struct {
		name      string
		grants    int    // tokens granted before the floor is raised
		floor     uint64 // the floor asked for
		wantNext  uint64 // the next token
		wantError bool
	}{
		{name: "above the counter", grants: 3, floor: 1000, wantNext: 1000},
		{name: "one above the last token", grants: 3, floor: 4, wantNext: 4},
		{name: "equal to the last token", grants: 3, floor: 3, wantNext: 4},
		{name: "below the last token", grants: 5, floor: 2, wantNext: 6},
		{name: "zero", grants: 2, floor: 0, wantNext: 3},
		{name: "on a new state", floor: 7, wantNext: 7},
		{name: "the maximum", grants: 1, floor: MaxTokenFloor, wantNext: MaxTokenFloor},
		{name: "above the maximum", grants: 3, floor: MaxTokenFloor + 1, wantNext: 4, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			for i := range tt.grants {
				res, _ := apply1(t, s, sec, acq(string(rune('a'+i)), "h", 10*sec))
				if res.Err != nil {
					t.Fatal(res.Err)
				}
			}
			before := s.LastToken()
			next, err := s.RaiseTokenFloor(tt.floor)
			if tt.wantError {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("RaiseTokenFloor(%d) = %v, want ErrInvalid", tt.floor, err)
				}
				if s.LastToken() != before {
					t.Fatalf("a refused floor changed the last token from %d to %d", before, s.LastToken())
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if next != tt.wantNext {
				t.Fatalf("RaiseTokenFloor(%d) says the next token is %d, want %d", tt.floor, next, tt.wantNext)
			}
			res, _ := apply1(t, s, 2*sec, acq("next", "h", 10*sec))
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if res.Lease.Token != tt.wantNext {
				t.Fatalf("next grant got token %d, want %d", res.Lease.Token, tt.wantNext)
			}
		})
	}
}

// TestTokenFloorInSnapshot: a raised floor is kept by a snapshot, so a
// state restored from it goes on above the floor, with nothing granted
// in between.
func TestTokenFloorInSnapshot(t *testing.T) {
	s := New()
	for _, name := range []string{"a", "b", "c"} {
		apply1(t, s, sec, acq(name, "h", 10*sec))
	}
	if _, err := s.RaiseTokenFloor(1_000_000); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastToken() != 999_999 {
		t.Fatalf("restored last token %d, want 999999", r.LastToken())
	}
	if l, ok := r.Lease("b"); !ok || l.Token != 2 {
		t.Fatalf("restored lease b = %+v, %v; want token 2", l, ok)
	}
	res, _ := apply1(t, r, 2*sec, acq("d", "h", 10*sec))
	if res.Err != nil || res.Lease.Token != 1_000_000 {
		t.Fatalf("first grant after the restore: token %d, err %v; want 1000000", res.Lease.Token, res.Err)
	}
	// Raising it again to a lower floor changes nothing.
	if next, _ := r.RaiseTokenFloor(10); next != 1_000_001 {
		t.Fatalf("a lower floor moved the next token to %d, want 1000001", next)
	}
}
