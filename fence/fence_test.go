package fence_test

import (
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/fence"
)

func TestStaleErrorMatches(t *testing.T) {
	var err error = &fence.StaleError{Resource: "r", Token: 3, Highest: 5}
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, fence.ErrStale) {
		t.Fatalf("errors.Is(%v, ErrStale) = false", wrapped)
	}
	se, ok := errors.AsType[*fence.StaleError](wrapped)
	if !ok || se.Token != 3 || se.Highest != 5 {
		t.Fatalf("AsType = %+v, %v; want token 3, highest 5", se, ok)
	}
	if errors.Is(err, fence.ErrInvalid) {
		t.Fatal("a stale error matches ErrInvalid")
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resource string
		token    uint64
		want     error
		want64   error
	}{
		{"ok", "r", 1, nil, nil},
		{"empty resource", "", 1, fence.ErrEmptyResource, fence.ErrEmptyResource},
		{"token 0", "r", 0, fence.ErrZeroToken, fence.ErrZeroToken},
		{"largest int64", "r", math.MaxInt64, nil, nil},
		{"above int64", "r", math.MaxInt64 + 1, nil, fence.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := fence.Check(tc.resource, tc.token); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Check = %v, want %v", err, tc.want)
			}
			err := fence.CheckInt64(tc.resource, tc.token)
			if !errors.Is(err, tc.want64) || (tc.want64 == nil) != (err == nil) {
				t.Errorf("CheckInt64 = %v, want %v", err, tc.want64)
			}
			if err != nil && !errors.Is(err, fence.ErrInvalid) {
				t.Errorf("%v does not match ErrInvalid", err)
			}
		})
	}
}

func TestMemory(t *testing.T) {
	var m fence.Memory
	steps := []struct {
		token uint64
		stale bool
	}{{5, false}, {5, false}, {7, false}, {6, true}, {7, false}, {8, false}, {1, true}}
	for _, s := range steps {
		err := m.Advance("r", s.token)
		if got := errors.Is(err, fence.ErrStale); got != s.stale {
			t.Fatalf("Advance(%d) = %v, stale %t; want stale %t", s.token, err, got, s.stale)
		}
	}
	if h := m.Highest("r"); h != 8 {
		t.Fatalf("Highest = %d, want 8", h)
	}
	if h := m.Highest("other"); h != 0 {
		t.Fatalf("Highest(other) = %d, want 0", h)
	}
	if err := m.Advance("", 1); !errors.Is(err, fence.ErrEmptyResource) {
		t.Fatalf("Advance with no resource = %v", err)
	}
	if err := m.Advance("r", 0); !errors.Is(err, fence.ErrZeroToken) {
		t.Fatalf("Advance with token 0 = %v", err)
	}
	if h := m.Highest("r"); h != 8 {
		t.Fatalf("bad input changed the fence: highest %d", h)
	}
}

func TestGrant(t *testing.T) {
	g := fence.Grant("jobs/nightly", 42)
	if g.Name() != "jobs/nightly" || g.Token() != 42 {
		t.Fatalf("Grant = %s %d", g.Name(), g.Token())
	}
}

// An *election.Lease is a Lease: guards take it as it is.
var _ fence.Lease = (*election.Lease)(nil)

// TestDriversStayOut checks that programs using client, election or fence
// do not pull in a database driver: only the guard packages import them.
func TestDriversStayOut(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/tenure-io/tenure/client",
		"github.com/tenure-io/tenure/election", "github.com/tenure-io/tenure/fence").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, driver := range []string{"github.com/jackc/", "github.com/redis/"} {
			if strings.HasPrefix(dep, driver) {
				t.Errorf("client, election or fence imports %s", dep)
			}
		}
	}
}
