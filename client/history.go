package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
)

// Ending says how a term of a lease ended.
type Ending string

// Endings, as History reports them.
const (
	// EndingNone: the term has not ended; its grant is held.
	EndingNone      Ending = ""
	EndingReleased  Ending = "released"
	EndingExpired   Ending = "expired"
	EndingRevoked   Ending = "revoked"
	EndingHandedOff Ending = "handed_off"
)

// Term is one grant of a name in its history: who held it, with which
// token, from when to when, and how it ended.
type Term struct {
	Name   string
	Holder string
	Token  uint64
	// Principal is the authenticated caller that acquired the grant, ""
	// without authentication.
	Principal string
	// Limit is the semaphore limit of the grant, 0 for a plain lease.
	Limit int
	// Start and End are the leader's wall clock when it applied the
	// grant and its end, for display: zero when unknown, and End while
	// the term is held. An expired term ended at its expiry.
	Start, End time.Time
	// Ending is how the term ended, EndingNone while it is held.
	Ending Ending
	// Reason is a revocation's reason.
	Reason string
	// WritesAccepted and WritesRefused count the fenced writes of the
	// built-in store (Put, Delete) under the term's token.
	WritesAccepted, WritesRefused uint64
	// ClusterStart and ClusterEnd are the same times in cluster time,
	// which decides expiry and retention.
	ClusterStart, ClusterEnd time.Duration
	// Shared is true for the term of a shared (read) grant.
	Shared bool
}

// Held reports whether the term has not ended.
func (t Term) Held() bool { return t.Ending == EndingNone }

// HistoryOptions narrow what History returns.
type HistoryOptions struct {
	// Since, if not zero, leaves out the terms that ended before it.
	Since time.Time
	// Limit, if positive, returns at most this many terms, the newest.
	Limit int
}

// History returns the kept terms of name, newest first: every term still
// held and, of the ended ones, as many and as recent as the cluster's
// retention keeps (tenured --history-terms and --history-age). A name
// with no kept term gives no terms and no error.
func (c *Client) History(ctx context.Context, name string, opts HistoryOptions) ([]Term, error) {
	req := &tenurev1.HistoryRequest{Name: name}
	if !opts.Since.IsZero() {
		req.Since = timestamppb.New(opts.Since)
	}
	if opts.Limit > 0 {
		req.Limit = uint32(opts.Limit)
	}
	res, _, err := unary(ctx, c, retryAlways, req, leaseService, tenurev1connect.LeaseServiceClient.History)
	if err != nil {
		return nil, err
	}
	out := make([]Term, 0, len(res.GetTerms()))
	for _, t := range res.GetTerms() {
		out = append(out, termFromProto(t))
	}
	return out, nil
}

func termFromProto(p *tenurev1.Term) Term {
	t := Term{Name: p.GetName(), Holder: p.GetHolder(), Token: p.GetToken(), Principal: p.GetPrincipal(),
		Limit: int(p.GetLimit()), Reason: p.GetReason(), WritesAccepted: p.GetWritesAccepted(),
		WritesRefused: p.GetWritesRefused(), ClusterStart: p.GetClusterStart().AsDuration(),
		Shared: p.GetShared()}
	if p.StartTime != nil {
		t.Start = p.GetStartTime().AsTime()
	}
	if p.EndTime != nil {
		t.End = p.GetEndTime().AsTime()
	}
	if p.ClusterEnd != nil {
		t.ClusterEnd = p.GetClusterEnd().AsDuration()
	}
	switch p.GetEnding() {
	case tenurev1.Term_ENDING_RELEASED:
		t.Ending = EndingReleased
	case tenurev1.Term_ENDING_EXPIRED:
		t.Ending = EndingExpired
	case tenurev1.Term_ENDING_REVOKED:
		t.Ending = EndingRevoked
	case tenurev1.Term_ENDING_HANDED_OFF:
		t.Ending = EndingHandedOff
	}
	return t
}
