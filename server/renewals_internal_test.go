package server

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/lease"
)

// renewBatch draws a BatchRequest of renewals.
func renewBatch(t *rapid.T) *tenurev1.BatchRequest {
	req := &tenurev1.BatchRequest{}
	for range rapid.IntRange(1, 4).Draw(t, "ops") {
		r := &tenurev1.RenewRequest{}
		for range rapid.IntRange(0, 4).Draw(t, "refs") {
			ref := &tenurev1.LeaseRef{
				Name:  rapid.StringN(0, 20, -1).Draw(t, "name"),
				Token: rapid.Uint64().Draw(t, "token"),
			}
			if rapid.Bool().Draw(t, "ttl") {
				ref.Ttl = &durationpb.Duration{
					Seconds: rapid.Int64().Draw(t, "seconds"),
					Nanos:   rapid.Int32().Draw(t, "nanos"),
				}
				if rapid.Bool().Draw(t, "plain") {
					ref.Ttl = durationpb.New(time.Duration(rapid.Int64Range(-1e12, 1e12).Draw(t, "d")))
				}
			}
			r.Leases = append(r.Leases, ref)
		}
		if rapid.Bool().Draw(t, "id") {
			r.RequestId = &tenurev1.RequestID{
				Session: rapid.StringN(0, 8, -1).Draw(t, "session"),
				Seq:     rapid.Uint64().Draw(t, "seq"),
				Floor:   rapid.Uint64().Draw(t, "floor"),
			}
		}
		req.Ops = append(req.Ops, &tenurev1.BatchOp{Op: &tenurev1.BatchOp_Renew{Renew: r}})
	}
	return req
}

// The ops decodeRenewals reads off the wire are those the usual path
// makes (proto.Unmarshal, then renewOp), for any batch of renewals, also
// when the strings come from those of the batches decoded before it (as
// on a connection), or from none.
func TestDecodeRenewalsAsMessagesDo(t *testing.T) {
	ctx := context.WithValue(context.Background(), identityKey{}, identity{principal: "p"})
	conn := new(recentStrings)
	rapid.Check(t, func(t *rapid.T) {
		req := renewBatch(t)
		b, err := proto.MarshalOptions{Deterministic: rapid.Bool().Draw(t, "deterministic")}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		rs := conn
		if rapid.Bool().Draw(t, "no recent strings") {
			rs = nil
		}
		got, ok := decodeRenewals(b, "p", rs)
		if !ok {
			t.Fatalf("not decoded: %v", req)
		}
		msg := new(tenurev1.BatchRequest)
		if err := proto.Unmarshal(b, msg); err != nil {
			t.Fatal(err)
		}
		var want []lease.Op
		for _, o := range msg.GetOps() {
			want = append(want, renewOp(ctx, o.GetRenew()))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
		}
	})
}

// Whatever is not a plain batch of renewals is left to the usual path,
// which answers it as the Batch method does: ok is false.
func TestDecodeRenewalsLeavesTheRest(t *testing.T) {
	renew := &tenurev1.BatchOp{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{
		Leases:    []*tenurev1.LeaseRef{{Name: "a", Token: 1, Ttl: durationpb.New(time.Second)}},
		RequestId: &tenurev1.RequestID{Session: "s", Seq: 1}}}}
	plain, err := proto.Marshal(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{renew}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeRenewals(plain, "", nil); !ok {
		t.Fatal("a plain renewal was not decoded")
	}
	acquire, _ := proto.Marshal(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{renew,
		{Op: &tenurev1.BatchOp_Acquire{Acquire: &tenurev1.AcquireRequest{Name: "a"}}}}})
	badName, _ := proto.Marshal(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{{Op: &tenurev1.BatchOp_Renew{Renew: &tenurev1.RenewRequest{
		Leases: []*tenurev1.LeaseRef{{Name: "ok"}}}}}}})
	badName[len(badName)-1] = 0xff // the name's one byte: not UTF-8
	idTwice := protowire.AppendTag(nil, 2, protowire.BytesType)
	idTwice = protowire.AppendBytes(idTwice, nil)
	idTwice = append(idTwice, idTwice...)
	op := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), idTwice)
	idTwiceBatch := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), op)
	unknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), plain...), 9, protowire.VarintType), 1)
	var tooMany []byte
	for range MaxBatchOps + 1 {
		tooMany = append(tooMany, plain...)
	}
	for name, b := range map[string][]byte{
		"empty":               nil,
		"with an acquire":     acquire,
		"a name not in UTF-8": badName,
		"a request ID twice":  idTwiceBatch,
		"an unknown field":    unknown,
		"cut short":           plain[:len(plain)-1],
		"too many ops":        tooMany,
	} {
		if ops, ok := decodeRenewals(b, "", nil); ok {
			t.Errorf("%s: decoded as %+v; want it left to proto.Unmarshal", name, ops)
		}
	}
}

// renewResults draws the results of a batch of renewal ops, none failed
// as a whole: renewed leases with every field the answer carries, and
// renewals refused as stale, revoked or otherwise.
func renewResults(t *rapid.T) []lease.Result {
	var out []lease.Result
	for range rapid.IntRange(1, 4).Draw(t, "ops") {
		res := lease.Result{Now: time.Duration(rapid.Int64Range(0, 1e15).Draw(t, "now"))}
		for range rapid.IntRange(0, 5).Draw(t, "renewed") {
			ref := lease.Ref{Name: rapid.StringN(0, 20, -1).Draw(t, "name"), Token: rapid.Uint64().Draw(t, "token")}
			r := lease.RenewResult{Ref: ref}
			switch rapid.IntRange(0, 3).Draw(t, "outcome") {
			case 0:
				r.Err = &lease.StaleError{Name: ref.Name, Token: ref.Token, Detail: rapid.StringN(0, 10, -1).Draw(t, "detail")}
			case 1:
				r.Err = &lease.RevokedError{Name: ref.Name, Token: ref.Token, Reason: rapid.StringN(0, 10, -1).Draw(t, "reason")}
			case 2:
				r.Err = lease.ErrNotFound
			default:
				d := func(label string) time.Duration {
					return time.Duration(rapid.Int64Range(-1e12, 1e15).Draw(t, label))
				}
				r.Lease = lease.Lease{
					Name: ref.Name, Holder: rapid.StringN(0, 10, -1).Draw(t, "holder"), Token: ref.Token,
					TTL: d("ttl"), GrantedAt: d("granted"), ExpiresAt: d("expires"),
					Limit: rapid.IntRange(-1, 1<<33).Draw(t, "limit"), LockDelay: d("delay"),
					Shared: rapid.Bool().Draw(t, "shared"), Priority: rapid.IntRange(-5, 1<<33).Draw(t, "priority"),
				}
				if rapid.Bool().Draw(t, "promised") {
					r.Lease.Promised = d("promise")
				}
				if rapid.Bool().Draw(t, "zero") {
					r.Lease.TTL, r.Lease.LockDelay = 0, 0
				}
				r.HandoffRequested = rapid.StringN(0, 6, -1).Draw(t, "handoff")
			}
			res.Renewed = append(res.Renewed, r)
		}
		out = append(out, res)
	}
	return out
}

// The answer appendRenewalAnswers encodes is, byte for byte, the one
// proto.Marshal makes of the messages serveBatch answers with, and it
// counts the same renewals and rejections.
func TestRenewalAnswersAsMessagesDo(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		results := renewResults(t)
		viaMessages := &Server{metrics: newMetrics(prometheus.NewRegistry(), nil)}
		direct := &Server{metrics: newMetrics(prometheus.NewRegistry(), nil)}
		msg := &tenurev1.BatchResponse{}
		for _, r := range results {
			msg.Results = append(msg.Results, viaMessages.batchResult(lease.Op{Type: lease.OpRenew}, r))
		}
		want, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("frame header")
		got := direct.appendRenewalAnswers(prefix, results)
		if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("encoded\n%x\nwant\n%x", got[len(prefix):], want)
		}
		if g, w := counted(t, direct.metrics.renewals), counted(t, viaMessages.metrics.renewals); g != w {
			t.Fatalf("%v renewals counted, want %v", g, w)
		}
		for _, reason := range []string{lease.ReasonStaleToken, lease.ReasonNotFound, "UNAVAILABLE"} {
			g := counted(t, direct.metrics.rejections.WithLabelValues(reason))
			if w := counted(t, viaMessages.metrics.rejections.WithLabelValues(reason)); g != w {
				t.Fatalf("%v %s rejections counted, want %v", g, reason, w)
			}
		}
	})
}

// counted returns the value of counter c.
func counted(t *rapid.T, c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
