package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/lease"
)

// rawLease returns a LeaseService client of m over TLS that sends token.
func (s *secureCluster) rawLease(t *testing.T, m *testcluster.Member, token string) tenurev1connect.LeaseServiceClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	bearer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	return tenurev1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, "https://"+m.Addr,
		connect.WithGRPC(), connect.WithInterceptors(bearer))
}

// TestBatchChecksEachOp sends batches whose ops need different
// permissions: each op is checked as its own call would be, a refused op
// changes nothing, and the others still apply.
func TestBatchChecksEachOp(t *testing.T) {
	s := startSecure(t)
	ctx := ctxT(t)
	before := s.state(t, ctx)

	jobs := s.rawLease(t, s.follower(), s.tokens["jobsonly"])
	res, err := jobs.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
		batchAcquire("other/b", "j", 10*time.Second), // no permission on other/
		batchAcquire("jobs/a", "j", 10*time.Second),  // allowed
		batchPut("other/k", "other/b", 1),            // no permission on other/
	}}))
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	r := res.Msg.GetResults()
	for _, i := range []int{0, 2} {
		if e := r[i].GetError(); connect.Code(e.GetCode()) != connect.CodePermissionDenied {
			t.Errorf("op %d: got %v, want permission_denied", i, r[i])
		}
	}
	granted := r[1].GetAcquire().GetLease()
	if granted.GetName() != "jobs/a" {
		t.Fatalf("op 1: got %v, want a grant of jobs/a", r[1])
	}

	// alice may hold jobs/ too, but not release or renew jobsonly's grant,
	// whatever the token.
	alice := s.rawLease(t, s.c.Leader(), s.tokens["alice"])
	res, err = alice.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
		{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "jobs/a", Token: granted.GetToken()}}},
		{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: "jobs/a", Token: granted.GetToken()}}}}},
	}}))
	if err != nil {
		t.Fatalf("alice's batch: %v", err)
	}
	if err := batchErr(res.Msg.GetResults()[0]); !errors.Is(err, lease.ErrForbidden) {
		t.Errorf("alice releasing jobsonly's grant in a batch: %v, want forbidden", err)
	}
	if rr := res.Msg.GetResults()[1].GetRenew().GetResults(); len(rr) != 1 || rr[0].GetReason() == "" {
		t.Errorf("alice renewing jobsonly's grant in a batch: %v, want refused", res.Msg.GetResults()[1])
	}

	// A read-only principal's batch comes in, and each op is refused as
	// its own call would be, naming the op and its lease.
	reader := s.rawLease(t, s.c.Leader(), s.tokens["reader"])
	rres, err := reader.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchAcquire("jobs/r", "r", 10*time.Second)}}))
	if err != nil {
		t.Fatalf("a reader's batch: %v, want it in with each op refused", err)
	}
	if err := batchErr(rres.Msg.GetResults()[0]); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `may not acquire lease "jobs/r"`) {
		t.Errorf("a reader's batched acquire: %v, want permission denied naming the acquire of jobs/r", err)
	}

	// Only jobs/a changed, and it is still jobsonly's grant.
	admin := s.client(t, s.c.Leader(), s.tokens["ops"], nil)
	if l, err := admin.Get(ctx, "jobs/a"); err != nil || l.Holder != "j" || l.Token != granted.GetToken() {
		t.Errorf("jobs/a after the batches: %+v, %v; want still held by j with token %d", l, err, granted.GetToken())
	}
	after := s.state(t, ctx)
	if strings.Contains(after, "other/") || strings.Contains(before, "jobs/a") ||
		strings.Replace(after, fmt.Sprintf("jobs/a=j/%d ", granted.GetToken()), "", 1) !=
			strings.Replace(before, fmt.Sprintf("last_token=%d", granted.GetToken()-1), fmt.Sprintf("last_token=%d", granted.GetToken()), 1) {
		t.Errorf("state after the batches:\n got    %s\n before %s\n want only jobs/a granted", after, before)
	}
}
