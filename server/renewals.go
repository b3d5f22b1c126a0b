package server

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-io/tenure/lease"
)

// decodeRenewals reads b, an encoded BatchRequest, straight into the
// ops renewOp would make of it, when every op of it is a Renew and the
// encoding is the plain one a client's encoder writes (each field once,
// in any order, none unknown, strings in UTF-8); ok is false otherwise,
// and the request is decoded into messages as usual. A member renewing
// its lease every few seconds sends nothing else: this spares the
// server the messages, the reflection that fills them and the garbage.
// principal goes into every op (renewOp takes it from the context).
//
// The fields read here are those of tenure.proto: BatchRequest.ops = 1,
// BatchOp.renew = 2, RenewRequest.leases = 1 and request_id = 2,
// LeaseRef.name = 1, token = 2 and ttl = 3, Duration.seconds = 1 and
// nanos = 2, RequestID.session = 1, seq = 2 and floor = 3.
// TestDecodeRenewalsAsMessagesDo holds it to proto.Unmarshal.
func decodeRenewals(b []byte, principal string) (ops []lease.Op, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		// A BatchOp: exactly its renew field.
		num, typ, n = protowire.ConsumeTag(m)
		if n < 0 || num != 2 || typ != protowire.BytesType {
			return nil, false
		}
		r, n2 := protowire.ConsumeBytes(m[n:])
		if n2 < 0 || n+n2 != len(m) {
			return nil, false
		}
		op, ok := decodeRenew(r, principal)
		if !ok || len(ops) == MaxBatchOps {
			return nil, false
		}
		ops = append(ops, op)
	}
	return ops, len(ops) > 0
}

// decodeRenew reads a RenewRequest into the op renewOp makes of it.
func decodeRenew(b []byte, principal string) (lease.Op, bool) {
	op := lease.Op{Type: lease.OpRenew, Principal: principal}
	seenID := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return lease.Op{}, false
		}
		b = b[n:]
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return lease.Op{}, false
		}
		b = b[n:]
		switch {
		case num == 1:
			ref, ok := decodeRef(m)
			if !ok {
				return lease.Op{}, false
			}
			op.Refs = append(op.Refs, ref)
		case num == 2 && !seenID:
			seenID = true
			session, seq, floor, ok := decodeRequestID(m)
			if !ok {
				return lease.Op{}, false
			}
			if session != "" {
				op.Session, op.Seq, op.Floor = session, seq, floor
			}
		default:
			return lease.Op{}, false
		}
	}
	if op.Refs == nil {
		op.Refs = []lease.Ref{}
	}
	return op, true
}

// decodeRef reads a LeaseRef.
func decodeRef(b []byte) (lease.Ref, bool) {
	var (
		ref  lease.Ref
		seen [4]bool
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 3 || seen[num] {
			return lease.Ref{}, false
		}
		seen[num] = true
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, n := consumeString(b)
			if n < 0 {
				return lease.Ref{}, false
			}
			ref.Name, b = s, b[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return lease.Ref{}, false
			}
			ref.Token, b = v, b[n:]
		case num == 3 && typ == protowire.BytesType:
			d, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return lease.Ref{}, false
			}
			ttl, ok := decodeDuration(d)
			if !ok {
				return lease.Ref{}, false
			}
			ref.TTL, b = ttl, b[n:]
		default:
			return lease.Ref{}, false
		}
	}
	return ref, true
}

// decodeDuration reads a google.protobuf.Duration as AsDuration does.
func decodeDuration(b []byte) (d time.Duration, ok bool) {
	var (
		p    durationpb.Duration
		seen [3]bool
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || num < 1 || num > 2 || seen[num] {
			return 0, false
		}
		seen[num] = true
		v, n2 := protowire.ConsumeVarint(b[n:])
		if n2 < 0 {
			return 0, false
		}
		b = b[n+n2:]
		if num == 1 {
			p.Seconds = int64(v)
		} else {
			p.Nanos = int32(v)
		}
	}
	return p.AsDuration(), true
}

// decodeRequestID reads a RequestID.
func decodeRequestID(b []byte) (session string, seq, floor uint64, ok bool) {
	var seen [4]bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 3 || seen[num] {
			return "", 0, 0, false
		}
		seen[num] = true
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, n := consumeString(b)
			if n < 0 {
				return "", 0, 0, false
			}
			session, b = s, b[n:]
		case num != 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return "", 0, 0, false
			}
			if num == 2 {
				seq = v
			} else {
				floor = v
			}
			b = b[n:]
		default:
			return "", 0, 0, false
		}
	}
	return session, seq, floor, true
}

// consumeString reads a string field's value: n is negative if it is
// cut short or not UTF-8 (which proto.Unmarshal refuses).
func consumeString(b []byte) (string, int) {
	s, n := protowire.ConsumeBytes(b)
	if n < 0 || !utf8.Valid(s) {
		return "", -1
	}
	return string(s), n
}
