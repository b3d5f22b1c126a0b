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
// Strings come from rs, which returns the ones it made before for the
// same bytes (nil: new strings).
//
// The fields read here are those of tenure.proto: BatchRequest.ops = 1,
// BatchOp.renew = 2, RenewRequest.leases = 1 and request_id = 2,
// LeaseRef.name = 1, token = 2 and ttl = 3, Duration.seconds = 1 and
// nanos = 2, RequestID.session = 1, seq = 2 and floor = 3.
// TestDecodeRenewalsAsMessagesDo holds it to proto.Unmarshal.
func decodeRenewals(b []byte, principal string, rs *recentStrings) (ops []lease.Op, ok bool) {
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
		op, ok := decodeRenew(r, principal, rs)
		if !ok || len(ops) == MaxBatchOps {
			return nil, false
		}
		ops = append(ops, op)
	}
	return ops, len(ops) > 0
}

// decodeRenew reads a RenewRequest into the op renewOp makes of it.
func decodeRenew(b []byte, principal string, rs *recentStrings) (lease.Op, bool) {
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
			ref, ok := decodeRef(m, rs)
			if !ok {
				return lease.Op{}, false
			}
			op.Refs = append(op.Refs, ref)
		case num == 2 && !seenID:
			seenID = true
			session, seq, floor, ok := decodeRequestID(m, rs)
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
func decodeRef(b []byte, rs *recentStrings) (lease.Ref, bool) {
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
			s, n := consumeString(b, rs)
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
func decodeRequestID(b []byte, rs *recentStrings) (session string, seq, floor uint64, ok bool) {
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
			s, n := consumeString(b, rs)
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
func consumeString(b []byte, rs *recentStrings) (string, int) {
	s, n := protowire.ConsumeBytes(b)
	if n < 0 || !utf8.Valid(s) {
		return "", -1
	}
	return rs.get(s), n
}

// recentStrings keeps the last strings a connection's renewals were
// decoded into. A member renews the same leases in the same client
// session call after call: their names and the session's ID are the
// strings of its last call, and need no new allocation.
type recentStrings struct {
	last [4]string
	next int
}

// get returns b as a string: one of rs's if it holds it (or a new one if
// rs is nil).
func (rs *recentStrings) get(b []byte) string {
	if rs == nil {
		return string(b)
	}
	for _, s := range rs.last {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	rs.last[rs.next] = s
	rs.next = (rs.next + 1) % len(rs.last)
	return s
}

// appendRenewalAnswers appends to b the encoded BatchResponse that
// serveBatch answers for results, the results of renewal ops none of
// which failed as a whole (r.Err is nil; the renewals of single leases
// may have failed), at cluster time now: the bytes proto.Marshal makes
// of that message, without the messages. It counts the renewals and
// rejections as renewResponse does.
//
// The fields written are those of tenure.proto: BatchResponse.results =
// 1, BatchResult.renew = 2, RenewResponse.results = 1; RenewResult.name
// = 1, token = 2, lease = 3, reason = 4, message = 5, revoke_reason = 6,
// handoff_requested = 16; Lease.name = 1, holder = 2, token = 3, ttl =
// 4, remaining = 5, limit = 6, lock_delay = 7, shared = 8, priority =
// 16; Duration.seconds = 1, nanos = 2. Every field in field-number
// order, zero values left out, as proto.Marshal writes them.
// TestRenewalAnswersAsMessagesDo holds it to proto.Marshal.
func (s *Server) appendRenewalAnswers(b []byte, results []lease.Result) []byte {
	renewed := 0
	for i := range results {
		res := &results[i]
		var few [4]renewAnswer
		answers := few[:]
		if len(res.Renewed) > len(few) {
			answers = make([]renewAnswer, len(res.Renewed))
		}
		answers = answers[:len(res.Renewed)]
		size := 0
		for j, r := range res.Renewed {
			a := &answers[j]
			a.r = r
			if r.Err != nil {
				a.reason, a.message, a.revokeReason = s.renewRefused(r.Err)
			} else {
				a.leaseSize = leaseSize(r.Lease, res.Now)
				renewed++
			}
			a.size = a.sizeOf()
			size += protowire.SizeTag(1) + protowire.SizeBytes(a.size)
		}
		// BatchResult{renew: RenewResponse{results...}}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(2)+protowire.SizeBytes(size)))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		for j := range answers {
			b = answers[j].append(b, res.Now)
		}
	}
	s.metrics.renewals.Add(float64(renewed))
	return b
}

// renewAnswer is one RenewResult to encode.
type renewAnswer struct {
	r                             lease.RenewResult
	reason, message, revokeReason string
	leaseSize, size               int // of the Lease (if renewed) and of the RenewResult
}

func (a *renewAnswer) sizeOf() int {
	n := sizeString(1, a.r.Ref.Name) + sizeUint(2, a.r.Ref.Token)
	if a.r.Err == nil {
		n += protowire.SizeTag(3) + protowire.SizeBytes(a.leaseSize)
		n += sizeString(16, a.r.HandoffRequested)
	}
	return n + sizeString(4, a.reason) + sizeString(5, a.message) + sizeString(6, a.revokeReason)
}

// append appends the RenewResult as a field 1 of its RenewResponse.
func (a *renewAnswer) append(b []byte, now time.Duration) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(a.size))
	b = appendString(b, 1, a.r.Ref.Name)
	b = appendUint(b, 2, a.r.Ref.Token)
	if a.r.Err == nil {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(a.leaseSize))
		b = appendLease(b, a.r.Lease, now)
	}
	b = appendString(b, 4, a.reason)
	b = appendString(b, 5, a.message)
	b = appendString(b, 6, a.revokeReason)
	if a.r.Err == nil {
		b = appendString(b, 16, a.r.HandoffRequested)
	}
	return b
}

// leaseSize is the size of the Lease wire.FillLease makes of l at now;
// appendLease appends it.
func leaseSize(l lease.Lease, now time.Duration) int {
	n := sizeString(1, l.Name) + sizeString(2, l.Holder) + sizeUint(3, l.Token)
	n += sizeDuration(4, l.TTL, true) + sizeDuration(5, l.Remaining(now), true)
	n += sizeUint(6, uint64(uint32(l.Limit))) + sizeDuration(7, l.LockDelay, false)
	if l.Shared {
		n += protowire.SizeTag(8) + 1
	}
	return n + sizeUint(16, uint64(uint32(max(l.Priority, 0))))
}

func appendLease(b []byte, l lease.Lease, now time.Duration) []byte {
	b = appendString(b, 1, l.Name)
	b = appendString(b, 2, l.Holder)
	b = appendUint(b, 3, l.Token)
	b = appendDuration(b, 4, l.TTL, true)
	b = appendDuration(b, 5, l.Remaining(now), true)
	b = appendUint(b, 6, uint64(uint32(l.Limit)))
	b = appendDuration(b, 7, l.LockDelay, false)
	if l.Shared {
		b = protowire.AppendTag(b, 8, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return appendUint(b, 16, uint64(uint32(max(l.Priority, 0))))
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func sizeUint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// durationParts splits d as durationpb.New does.
func durationParts(d time.Duration) (seconds uint64, nanos uint64) {
	n := d.Nanoseconds()
	return uint64(n / 1e9), uint64(int64(int32(n % 1e9)))
}

// sizeDuration is the size of field num holding the Duration of d: left
// out when d is 0 unless always (a message set to zero).
func sizeDuration(num protowire.Number, d time.Duration, always bool) int {
	if d == 0 && !always {
		return 0
	}
	s, ns := durationParts(d)
	return protowire.SizeTag(num) + protowire.SizeBytes(sizeUint(1, s)+sizeUint(2, ns))
}

func appendDuration(b []byte, num protowire.Number, d time.Duration, always bool) []byte {
	if d == 0 && !always {
		return b
	}
	s, ns := durationParts(d)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeUint(1, s)+sizeUint(2, ns)))
	b = appendUint(b, 1, s)
	return appendUint(b, 2, ns)
}
