package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// A watch served by a member that crashes moves to another member and
// reports the current state again: the grant made while it was
// disconnected is not lost.
func TestWatchFailsOverBetweenMembers(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{Size: 3})
	leader := c.Leader()
	// A follower first, so that the watch is served by it.
	var follower *testcluster.Member
	eps := []string{}
	for _, m := range c.Members() {
		if m != leader && follower == nil {
			follower = m
			eps = append([]string{m.Addr}, eps...)
		} else {
			eps = append(eps, m.Addr)
		}
	}
	cl := mustClient(t, eps...)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := cl.Acquire(ctx, "jobs/a", "h", time.Minute); err != nil {
		t.Fatal(err)
	}
	for follower.Node.Status().Leases != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("the follower never applied the grant")
		case <-time.After(5 * time.Millisecond):
		}
	}
	events, err := cl.Watch(ctx, "jobs/")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	expectEvents(t, events, "current jobs/a/1@0", "synced")

	// Crash the member that serves the watch: the follower, unless a
	// slow first attempt made the client move on to another endpoint.
	serving := follower
	for _, m := range c.Members() {
		if m.Node.Watches() > 0 {
			serving = m
		}
	}
	c.Crash(serving)
	// Granted while the watch has no stream (or a new one on a member
	// that already applied it).
	_, err = cl.Acquire(ctx, "jobs/b", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The watch resumes on another member, which reports the current
	// state first: b is there, or (if that member has not applied it
	// yet) granted right after.
	var got []string
	synced := false
	for ev := range events {
		got = append(got, describe(ev))
		synced = synced || ev.Type == client.EventSynced
		if ev.Lease.Name == "jobs/b" {
			if ev.Type == client.EventGranted && !synced {
				t.Fatalf("events %q: a grant before the state was synced", got)
			}
			break
		}
	}
	if len(got) < 3 || got[0] != "reset" || got[1] != "current jobs/a/1@0" {
		t.Fatalf("events after the crash %q, want reset, the current state, then b", got)
	}
	if last := got[len(got)-1]; last != "current jobs/b/2@0" && !strings.HasPrefix(last, "granted jobs/b/2@") {
		t.Fatalf("events after the crash %q end with %q, want b's grant", got, last)
	}
	t.Logf("events after the crash: %q", got)
	cancel()
	drain(events)
}
