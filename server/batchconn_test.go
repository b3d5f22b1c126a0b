package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/server"
)

// rawConn is a batch connection spoken by hand, frame by frame.
type rawConn struct {
	t      *testing.T
	nc     net.Conn
	br     *bufio.Reader
	header http.Header // of the 101
}

// upgrade opens a batch connection to addr, sending header with the
// upgrade request.
func upgrade(t *testing.T, addr string, header http.Header) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, res := upgradeOn(t, nc, addr, header)
	if res.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("upgrade: %s %s; want 101", res.Status, body)
	}
	return c
}

// upgradeOn asks for the upgrade on nc and returns the answer.
func upgradeOn(t *testing.T, nc net.Conn, addr string, header http.Header) (*rawConn, *http.Response) {
	t.Helper()
	t.Cleanup(func() { nc.Close() })
	req, _ := http.NewRequest("GET", "http://"+addr+wire.BatchConnPath, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.BatchConnProtocol)
	if err := req.Write(nc); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, nc: nc, br: br, header: res.Header}, res
}

func (c *rawConn) send(id uint64, kind byte, msg proto.Message) {
	c.t.Helper()
	var b []byte
	if msg != nil {
		var err error
		if b, err = proto.Marshal(msg); err != nil {
			c.t.Fatal(err)
		}
	}
	if _, err := c.nc.Write(append(wire.AppendFrameHeader(nil, id, kind, len(b)), b...)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// next reads the next answer: its call ID and either its message
// (unmarshalled into a new message of the kind it has) or its error.
func (c *rawConn) next() (uint64, proto.Message, error) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	id, kind, payload, err := wire.ReadFrame(c.br, nil, 1<<30)
	if err != nil {
		return 0, nil, fmt.Errorf("read: %w", err)
	}
	var m proto.Message
	switch kind {
	case wire.FrameBatch:
		m = new(tenurev1.BatchResponse)
	case wire.FrameAcquire:
		m = new(tenurev1.AcquireResponse)
	case wire.FrameError:
		be := new(tenurev1.BatchError)
		if err := proto.Unmarshal(payload, be); err != nil {
			c.t.Fatal(err)
		}
		return id, nil, wire.FromBatchError(be)
	default:
		c.t.Fatalf("answer of kind %d", kind)
	}
	if err := proto.Unmarshal(payload, m); err != nil {
		c.t.Fatal(err)
	}
	return id, m, nil
}

// holdTTL is the TTL of the grants in these tests: no grant may expire
// while a test runs, however loaded the machine (a 5 s grant did, under
// go test -race beside the verifier, and the next write found another
// holder's token).
const holdTTL = time.Minute

func waitingAcquire(name, holder string) *tenurev1.AcquireRequest {
	return &tenurev1.AcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(holdTTL), Wait: true}
}

// TestBatchConnServesCalls speaks the batch connection with every
// member, leader and followers: Batch calls are answered with the
// results the Batch method gives, in order; a waiting Acquire waits on
// its own while later calls on the connection are served, is answered
// when granted, and leaves the queue when cancelled.
func TestBatchConnServesCalls(t *testing.T) {
	c, _, _ := cluster(t)
	ctx := ctxT(t)
	for _, m := range c.Members() {
		bc := upgrade(t, m.Addr, nil)
		if got := bc.header.Get(wire.ClusterIDHeader); got == "" {
			t.Errorf("%s: the 101 carries no cluster ID", m.ID)
		}
		name := "jobs/conn-" + m.ID
		bc.send(1, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchAcquire(name, "me", holdTTL)}})
		id, msg, err := bc.next()
		r := msg.(*tenurev1.BatchResponse).GetResults()
		if err != nil || id != 1 || len(r) != 1 || r[0].GetAcquire().GetLease().GetToken() == 0 {
			t.Fatalf("%s: first batch: call %d, %v, %v; want call 1 granted", m.ID, id, msg, err)
		}
		token := r[0].GetAcquire().GetLease().GetToken()

		// A renewal (on the leader, read straight off the wire) and a
		// renewal of a token that is not the current one.
		bc.send(11, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
			{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: name, Token: token}}}}},
			{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: name, Token: token + 1}}}}}}})
		id, msg, err = bc.next()
		if err != nil || id != 11 {
			t.Fatalf("%s: renewals: call %d, %v", m.ID, id, err)
		}
		r = msg.(*tenurev1.BatchResponse).GetResults()
		if l := r[0].GetRenew().GetResults()[0].GetLease(); len(r) != 2 || l.GetToken() != token || l.GetTtl().AsDuration() != holdTTL ||
			l.GetRemaining().AsDuration() <= 0 || l.GetRemaining().AsDuration() > holdTTL {
			t.Errorf("%s: a renewal: %v; want token %d renewed for %s", m.ID, r, token, holdTTL)
		}
		if rr := r[1].GetRenew().GetResults()[0]; rr.GetLease() != nil || rr.GetReason() != lease.ReasonStaleToken {
			t.Errorf("%s: a renewal of another token: %v; want %s", m.ID, rr, lease.ReasonStaleToken)
		}

		// An invalid renewal beside a valid one: refused alone, as the
		// Batch method refuses it.
		bc.send(12, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
			{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: "", Token: token}}}}},
			{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: name, Token: token}}}}}}})
		id, msg, err = bc.next()
		if err != nil || id != 12 {
			t.Fatalf("%s: renewals with an invalid one: call %d, %v", m.ID, id, err)
		}
		r = msg.(*tenurev1.BatchResponse).GetResults()
		if len(r) != 2 || !errors.Is(batchErr(r[0]), lease.ErrInvalid) || r[1].GetRenew().GetResults()[0].GetLease().GetToken() != token {
			t.Errorf("%s: renewals with an invalid one: %v; want invalid, then token %d renewed", m.ID, r, token)
		}

		// Two waiters queue behind the holder; the first is cancelled.
		bc.send(2, wire.FrameAcquire, waitingAcquire(name, "w1"))
		testcluster.WaitWaiters(t, ctx, c.Leader(), name, 1)
		bc.send(3, wire.FrameAcquire, waitingAcquire(name, "w2"))
		testcluster.WaitWaiters(t, ctx, c.Leader(), name, 2)
		bc.send(3, wire.FrameCancel, nil)
		testcluster.WaitWaiters(t, ctx, c.Leader(), name, 1)

		// While the wait goes on, the connection serves batches.
		bc.send(4, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
			batchPut("k/"+name, name, token), batchPut("k/"+name, name, token+1000)}})
		id, msg, err = bc.next()
		r = msg.(*tenurev1.BatchResponse).GetResults()
		if err != nil || id != 4 || len(r) != 2 || r[0].GetPut().GetRevision() == 0 || !errors.Is(batchErr(r[1]), lease.ErrStaleToken) {
			t.Fatalf("%s: batch during a wait: call %d, %v, %v; want call 4, a write and a stale token", m.ID, id, msg, err)
		}
		bc.send(5, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
			{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: name, Token: token}}}}})
		got := map[uint64]proto.Message{}
		for len(got) < 2 {
			id, msg, err := bc.next()
			if err != nil {
				t.Fatalf("%s: call %d: %v", m.ID, id, err)
			}
			got[id] = msg
		}
		if l := got[2].(*tenurev1.AcquireResponse).GetLease(); l.GetHolder() != "w1" || l.GetToken() <= token {
			t.Errorf("%s: the wait was answered with %v; want a grant to w1 above token %d", m.ID, got[2], token)
		}
		if r := got[5].(*tenurev1.BatchResponse).GetResults(); len(r) != 1 || r[0].GetRelease() == nil {
			t.Errorf("%s: release: %v", m.ID, got[5])
		}

		// An empty batch is refused as the Batch method refuses it, and
		// the connection goes on.
		bc.send(6, wire.FrameBatch, &tenurev1.BatchRequest{})
		if id, _, err := bc.next(); id != 6 || connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: an empty batch: call %d, %v; want call 6 invalid_argument", m.ID, id, err)
		}
		bc.send(7, wire.FrameAcquire, &tenurev1.AcquireRequest{Name: name, Holder: "w2", Ttl: durationpb.New(5 * time.Second)})
		var he *lease.HeldError
		if id, _, err := bc.next(); id != 7 || !errors.As(wire.FromConnectError(err), &he) || he.Holder != "w1" {
			t.Errorf("%s: a try of a held lease: call %d, %v; want call 7 held by w1", m.ID, id, err)
		}
	}
}

// A request for the batch connection that is not an HTTP/1.1 upgrade is
// told what it takes (426), and a frame longer than the most allowed
// ends the connection with resource_exhausted.
func TestBatchConnRefusesBadInput(t *testing.T) {
	_, addr := startPutServer(t)
	res, err := http.Get("http://" + addr + wire.BatchConnPath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUpgradeRequired || res.Header.Get("Upgrade") != wire.BatchConnProtocol {
		t.Errorf("a plain GET: %s, Upgrade %q; want 426 naming %s", res.Status, res.Header.Get("Upgrade"), wire.BatchConnProtocol)
	}

	bc := upgrade(t, addr, nil)
	bc.send(1, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchPut("k", "l", 1)}})
	if _, msg, err := bc.next(); err != nil || msg.(*tenurev1.BatchResponse).GetResults()[0].GetPut().GetRevision() != 1 {
		t.Fatalf("a put: %v, %v", msg, err)
	}
	if _, err := bc.nc.Write(wire.AppendFrameHeader(nil, 2, wire.FrameBatch, 64<<20)); err != nil {
		t.Fatal(err)
	}
	if id, _, err := bc.next(); id != 2 || connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("an oversized frame: call %d, %v; want call 2 resource_exhausted", id, err)
	}
	if _, _, err := bc.next(); !errors.Is(err, io.EOF) {
		t.Errorf("after an oversized frame: %v; want the connection closed", err)
	}
}

// startPutServer serves putNode on a new port; it returns the HTTP server
// and its address.
func startPutServer(t *testing.T) (*http.Server, string) {
	t.Helper()
	srv, err := server.New(server.Config{Node: putNode{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(ln.Addr().String(), srv.Handler())
	hs.RegisterOnShutdown(srv.EndBatchStreams)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return hs, ln.Addr().String()
}

// A graceful shutdown ends the batch connections that clients keep open
// between calls, rather than waiting for them, and a call that arrives
// after is answered unavailable (a wire error: not served, safe to send
// elsewhere) or finds the connection closed.
func TestShutdownEndsIdleBatchConns(t *testing.T) {
	hs, addr := startPutServer(t)
	bc := upgrade(t, addr, nil)
	bc.send(1, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchPut("k", "l", 1)}})
	if _, _, err := bc.next(); err != nil {
		t.Fatalf("first batch: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an idle batch connection open: %v; want it ended, not waited for", err)
	}
	if _, _, err := bc.next(); !errors.Is(err, io.EOF) {
		t.Errorf("the idle connection after shutdown: %v; want it closed", err)
	}
}

// With authentication on, an upgrade without valid credentials is
// refused (401) before the connection is taken over, and each call on an
// upgraded connection is checked as its own request would be.
func TestBatchConnNeedsCredentials(t *testing.T) {
	s := startSecure(t)
	m := s.follower()
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	dial := func() net.Conn {
		nc, err := tls.Dial("tcp", m.Addr, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	for _, token := range []string{"", "not-a-token"} {
		h := http.Header{}
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
		_, res := upgradeOn(t, dial(), m.Addr, h)
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("upgrade with token %q: %s; want 401", token, res.Status)
		}
	}
	bc, res := upgradeOn(t, dial(), m.Addr, http.Header{"Authorization": {"Bearer " + s.tokens["jobsonly"]}})
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade with a valid token: %s; want 101", res.Status)
	}
	bc.send(1, wire.FrameAcquire, waitingAcquire("other/a", "j"))
	if id, _, err := bc.next(); id != 1 || connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a waiting acquire outside the token's roles: call %d, %v; want call 1 permission_denied", id, err)
	}
	bc.send(2, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
		batchAcquire("other/b", "j", 10*time.Second), batchAcquire("jobs/b", "j", 10*time.Second)}})
	id, msg, err := bc.next()
	if err != nil || id != 2 {
		t.Fatalf("batch: call %d, %v", id, err)
	}
	r := msg.(*tenurev1.BatchResponse).GetResults()
	if connect.Code(r[0].GetError().GetCode()) != connect.CodePermissionDenied || r[1].GetAcquire().GetLease().GetToken() == 0 {
		t.Errorf("batch: %v; want other/b refused and jobs/b granted", r)
	}
}

// A Batch call is counted under the same method label however it came:
// on its own request, or on a batch connection.
func TestBatchConnCallsAreCountedAsTheirMethod(t *testing.T) {
	_, addr := startPutServer(t)
	ctx := ctxT(t)
	if _, err := dial(t, addr).lease.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchPut("k", "l", 1)}})); err != nil {
		t.Fatalf("Batch: %v", err)
	}
	bc := upgrade(t, addr, nil)
	bc.send(1, wire.FrameBatch, &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchPut("k", "l", 1)}})
	if _, _, err := bc.next(); err != nil {
		t.Fatalf("Batch on the batch connection: %v", err)
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	want := `tenure_requests_total{code="ok",method="LeaseService/Batch"} 2`
	if !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(string(body), "tenure_requests_total"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
