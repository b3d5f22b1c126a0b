package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// The first byte of an encoded Batch. Version 2 adds the leader's wall
// clock (Batch.Wall) after the cluster time; a batch without one is
// written as version 1, byte for byte as before version 2 existed.
// Version 3 adds the renewal headroom (Batch.Headroom) after the wall
// clock; a batch without headroom is written as version 1 or 2.
const (
	batchVersion         = 1
	batchVersionWall     = 2
	batchVersionHeadroom = 3
)

// ErrCorrupt is returned by DecodeBatch for bytes that are not a Batch.
var ErrCorrupt = errors.New("lease: corrupt batch")

// Field flags of an encoded Op: a field is present only when its bit is set,
// so the common ops stay a few bytes long.
const (
	fName = 1 << iota
	fHolder
	fTTL
	fToken
	fWait
	fWaitTimeout
	fRefs
	fPrefix
	fKey
	fValue
	// fRefTTLs: after the value, one TTL (zigzag varint) per ref, in ref
	// order; set when any ref has a TTL. Added with renewals that change
	// the TTL; entries written before it never have it.
	fRefTTLs
	// fLimit: after the ref TTLs, the semaphore limit (uvarint). Added
	// with semaphores.
	fLimit
	// fPrincipal: after the limit, the authenticated caller (string).
	// Added with authentication; entries written before it never have it.
	fPrincipal
	// fSession: after the principal, the client session (string), the
	// seq and the floor (uvarints). Added with client sessions.
	fSession
	// fReason: after the session, a revocation's reason (string). Added
	// with revocations.
	fReason
	// fLockDelay: after the reason, an acquire's lock-delay (zigzag
	// varint). Added with lock-delays.
	fLockDelay
	// fShared: a shared acquire (no payload). Added with shared grants.
	fShared
	// fHandoff: set on an OpRelease that is a handoff; after the
	// lock-delay (fShared has no payload), its candidate (string, ""
	// for the first waiter).
	// Added with handoffs.
	fHandoff
	// fPriority: after the handoff, an acquire's priority (uvarint).
	// Added with handoffs.
	fPriority
	// fAt: after the priority, an OpTrim's time (zigzag varint). Added
	// with renewals answered from the leader's memory.
	fAt
)

// AppendBatch appends the binary encoding of b to buf.
func AppendBatch(buf []byte, b Batch) []byte {
	switch {
	case b.Headroom != 0:
		buf = append(buf, batchVersionHeadroom)
		buf = binary.AppendVarint(buf, int64(b.Now))
		buf = binary.AppendVarint(buf, b.Wall)
		buf = binary.AppendVarint(buf, int64(b.Headroom))
	case b.Wall != 0:
		buf = append(buf, batchVersionWall)
		buf = binary.AppendVarint(buf, int64(b.Now))
		buf = binary.AppendVarint(buf, b.Wall)
	default:
		buf = append(buf, batchVersion)
		buf = binary.AppendVarint(buf, int64(b.Now))
	}
	buf = binary.AppendUvarint(buf, uint64(len(b.Ops)))
	for _, op := range b.Ops {
		buf = appendOp(buf, op)
	}
	return buf
}

// EncodeBatch returns the binary encoding of b.
func EncodeBatch(b Batch) []byte { return AppendBatch(nil, b) }

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func appendOp(buf []byte, op Op) []byte {
	var flags uint64
	set := func(ok bool, f uint64) {
		if ok {
			flags |= f
		}
	}
	set(op.Name != "", fName)
	set(op.Holder != "", fHolder)
	set(op.TTL != 0, fTTL)
	set(op.Token != 0, fToken)
	set(op.Wait, fWait)
	set(op.WaitTimeout != 0, fWaitTimeout)
	set(len(op.Refs) > 0, fRefs)
	set(op.Prefix != "", fPrefix)
	set(op.Key != "", fKey)
	set(op.Value != nil, fValue)
	for _, r := range op.Refs {
		set(r.TTL != 0, fRefTTLs)
	}
	set(op.Limit != 0, fLimit)
	set(op.Principal != "", fPrincipal)
	set(op.Session != "", fSession)
	set(op.Reason != "", fReason)
	set(op.LockDelay != 0, fLockDelay)
	set(op.Shared, fShared)
	set(op.Handoff, fHandoff)
	set(op.Priority != 0, fPriority)
	set(op.At != 0, fAt)
	buf = append(buf, byte(op.Type))
	buf = binary.AppendUvarint(buf, flags)
	if flags&fName != 0 {
		buf = appendString(buf, op.Name)
	}
	if flags&fHolder != 0 {
		buf = appendString(buf, op.Holder)
	}
	if flags&fTTL != 0 {
		buf = binary.AppendVarint(buf, int64(op.TTL))
	}
	if flags&fToken != 0 {
		buf = binary.AppendUvarint(buf, op.Token)
	}
	if flags&fWaitTimeout != 0 {
		buf = binary.AppendVarint(buf, int64(op.WaitTimeout))
	}
	if flags&fRefs != 0 {
		buf = binary.AppendUvarint(buf, uint64(len(op.Refs)))
		for _, r := range op.Refs {
			buf = appendString(buf, r.Name)
			buf = binary.AppendUvarint(buf, r.Token)
		}
	}
	if flags&fPrefix != 0 {
		buf = appendString(buf, op.Prefix)
	}
	if flags&fKey != 0 {
		buf = appendString(buf, op.Key)
	}
	if flags&fValue != 0 {
		buf = appendString(buf, string(op.Value))
	}
	if flags&fRefTTLs != 0 {
		for _, r := range op.Refs {
			buf = binary.AppendVarint(buf, int64(r.TTL))
		}
	}
	if flags&fLimit != 0 {
		buf = binary.AppendUvarint(buf, uint64(op.Limit))
	}
	if flags&fPrincipal != 0 {
		buf = appendString(buf, op.Principal)
	}
	if flags&fSession != 0 {
		buf = appendString(buf, op.Session)
		buf = binary.AppendUvarint(buf, op.Seq)
		buf = binary.AppendUvarint(buf, op.Floor)
	}
	if flags&fReason != 0 {
		buf = appendString(buf, op.Reason)
	}
	if flags&fLockDelay != 0 {
		buf = binary.AppendVarint(buf, int64(op.LockDelay))
	}
	if flags&fHandoff != 0 {
		buf = appendString(buf, op.HandoffTo)
	}
	if flags&fPriority != 0 {
		buf = binary.AppendUvarint(buf, uint64(op.Priority))
	}
	if flags&fAt != 0 {
		buf = binary.AppendVarint(buf, int64(op.At))
	}
	return buf
}

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail(what)
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) string(what string) string { return string(d.bytes(what)) }

// count reads a length and rejects one that cannot fit in the rest of the
// input (each element takes at least min bytes), so corrupt input cannot
// make the decoder allocate without bound.
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.buf)/min) {
		d.fail(what)
		return 0
	}
	return int(n)
}

// DecodeBatch decodes a Batch encoded by AppendBatch. It never panics; bad
// input gives an error wrapping ErrCorrupt.
func DecodeBatch(data []byte) (Batch, error) {
	if len(data) == 0 || data[0] < batchVersion || data[0] > batchVersionHeadroom {
		return Batch{}, fmt.Errorf("%w: unknown version", ErrCorrupt)
	}
	d := &decoder{buf: data[1:]}
	b := Batch{Now: time.Duration(d.varint("time"))}
	if data[0] >= batchVersionWall {
		b.Wall = d.varint("wall clock")
	}
	if data[0] >= batchVersionHeadroom {
		b.Headroom = time.Duration(d.varint("headroom"))
		if b.Headroom <= 0 {
			d.fail("headroom")
		}
	}
	n := d.count("op count", 2)
	if n > 0 {
		b.Ops = make([]Op, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		b.Ops = append(b.Ops, d.op())
	}
	if d.err == nil && len(d.buf) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return Batch{}, d.err
	}
	return b, nil
}

func (d *decoder) op() Op {
	if len(d.buf) == 0 {
		d.fail("op")
		return Op{}
	}
	op := Op{Type: OpType(d.buf[0])}
	d.buf = d.buf[1:]
	if _, ok := opNames[op.Type]; !ok {
		d.fail("op type")
		return Op{}
	}
	flags := d.uvarint("flags")
	if flags >= fAt<<1 || (flags&fRefTTLs != 0 && flags&fRefs == 0) {
		d.fail("flags")
	}
	if flags&fName != 0 {
		op.Name = d.string("name")
	}
	if flags&fHolder != 0 {
		op.Holder = d.string("holder")
	}
	if flags&fTTL != 0 {
		op.TTL = time.Duration(d.varint("ttl"))
	}
	if flags&fToken != 0 {
		op.Token = d.uvarint("token")
	}
	op.Wait = flags&fWait != 0
	if flags&fWaitTimeout != 0 {
		op.WaitTimeout = time.Duration(d.varint("wait timeout"))
	}
	if flags&fRefs != 0 {
		n := d.count("refs", 2)
		op.Refs = make([]Ref, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			op.Refs = append(op.Refs, Ref{Name: d.string("ref name"), Token: d.uvarint("ref token")})
		}
	}
	if flags&fPrefix != 0 {
		op.Prefix = d.string("prefix")
	}
	if flags&fKey != 0 {
		op.Key = d.string("key")
	}
	if flags&fValue != 0 {
		op.Value = append([]byte{}, d.bytes("value")...)
	}
	if flags&fRefTTLs != 0 {
		for i := range op.Refs {
			op.Refs[i].TTL = time.Duration(d.varint("ref ttl"))
		}
	}
	if flags&fLimit != 0 {
		limit := d.uvarint("limit")
		if limit > math.MaxInt32 {
			d.fail("limit")
		}
		op.Limit = int(limit)
	}
	if flags&fPrincipal != 0 {
		op.Principal = d.string("principal")
	}
	if flags&fSession != 0 {
		op.Session = d.string("session")
		op.Seq = d.uvarint("seq")
		op.Floor = d.uvarint("floor")
	}
	if flags&fReason != 0 {
		op.Reason = d.string("reason")
	}
	if flags&fLockDelay != 0 {
		op.LockDelay = time.Duration(d.varint("lock delay"))
	}
	op.Shared = flags&fShared != 0
	if flags&fHandoff != 0 {
		op.Handoff = true
		op.HandoffTo = d.string("handoff candidate")
	}
	if flags&fPriority != 0 {
		p := d.uvarint("priority")
		if p > math.MaxInt32 {
			d.fail("priority")
		}
		op.Priority = int(p)
	}
	if flags&fAt != 0 {
		op.At = time.Duration(d.varint("at"))
	}
	return op
}
