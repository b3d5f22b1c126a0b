package node

import (
	"reflect"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// The last try of a waiting acquire whose wait ran out is the same call
// without the wait: it keeps every other field of the acquire (a grant
// that raced the timeout is renewed by it, and must keep its TTL, limit
// and lock-delay). A field added to lease.Op later is kept too.
func TestLastTryKeepsTheCall(t *testing.T) {
	op := lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "h", TTL: 5 * time.Second, Wait: true,
		WaitTimeout: time.Second, Limit: 3, Principal: "p", Session: "s", Seq: 7, Floor: 2,
		LockDelay: 15 * time.Second, Priority: 4, Shared: true}
	// Every field must be set here, so that a new one is not forgotten.
	v := reflect.ValueOf(op)
	for i := range v.NumField() {
		switch f := v.Type().Field(i); f.Name {
		case "Token", "Refs", "Prefix", "Key", "Value", "Reason", "Handoff", "HandoffTo", "At":
			// Not an acquire's.
		default:
			if v.Field(i).IsZero() {
				t.Fatalf("the test's op leaves the acquire's field %s zero: set it", f.Name)
			}
		}
	}
	want := op
	want.Wait, want.WaitTimeout = false, 0
	if got := lastTry(op); !reflect.DeepEqual(got, want) {
		t.Fatalf("lastTry = %+v, want %+v", got, want)
	}
}
