package lease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

// codecBatches are valid batches covering every op type and field.
func codecBatches() []Batch {
	return []Batch{
		{},
		{Now: 1},
		{Now: -5 * sec},
		{Now: math.MaxInt64, Ops: []Op{{Type: OpExpire}}},
		{Now: math.MinInt64, Ops: []Op{{Type: OpList}}},
		{Now: 12 * sec, Ops: []Op{
			acq("db/primary", "node-1", 10*sec),
			acqWait("db/primary", "node-2", 10*sec, 30*sec),
			{Type: OpAcquire, Name: "w", Holder: "h", TTL: sec, Wait: true},
		}},
		{Now: 3, Ops: []Op{
			renew(Ref{Name: "a", Token: 1}, Ref{Name: "b", Token: math.MaxUint64}, Ref{Name: "", Token: 7}),
			rel("a", 1),
			{Type: OpExpire},
			{Type: OpGet, Name: "a"},
			{Type: OpList, Prefix: "app/"},
			put("k", "v", "a", 1),
			{Type: OpPut, Key: "k", Name: "a", Token: 1, Value: []byte{}},
			{Type: OpPut, Key: "k", Name: "a", Token: 1, Value: []byte{0, 0xff, '\n'}},
			{Type: OpKVGet, Key: "k"},
			del("k", "a", 1),
			{Type: OpCancelWait, Name: "a", Holder: "h"},
		}},
		{Ops: []Op{{
			// Every field at once, including the odd values.
			// The holder is long enough for a two-byte length.
			Type: OpAcquire, Name: "日本語", Holder: string(bytes.Repeat([]byte("h"), 130)),
			TTL: -1, Token: 1 << 63, Wait: true, WaitTimeout: math.MinInt64,
			Refs: []Ref{{Name: "r"}}, Prefix: "p", Key: "\x00", Value: []byte{7, 7, 7},
		}}},
		// Renewals that set a TTL (fRefTTLs); a ref without one is zero.
		{Now: 4, Ops: []Op{
			renew(Ref{Name: "a", Token: 1, TTL: 30 * sec}, Ref{Name: "b", Token: 2}),
			{Type: OpRenew, Refs: []Ref{{Name: "c", Token: 3, TTL: -1}}, Value: []byte("v")},
		}},
		{Ops: []Op{{Type: OpKVList}, {Type: OpKVList, Prefix: "reports/"}}},
		// Semaphore acquires (fLimit).
		{Now: 5, Ops: []Op{
			{Type: OpAcquire, Name: "jobs", Holder: "h", TTL: sec, Limit: 3},
			{Type: OpAcquire, Name: "jobs", Holder: "h", TTL: sec, Limit: 1000, Wait: true, WaitTimeout: sec},
		}},
		// Revocations (fReason) and lock-delays (fLockDelay).
		{Now: 6, Ops: []Op{
			{Type: OpRevoke, Name: "a", Reason: "stuck worker"},
			{Type: OpRevoke, Name: "a", Token: 9, Reason: "ü", Principal: "ops", Session: "s", Seq: 2, Floor: 1},
			{Type: OpAcquire, Name: "a", Holder: "h", TTL: sec, LockDelay: 15 * sec},
			{Type: OpAcquire, Name: "a", Holder: "h", TTL: sec, Limit: 2, Wait: true, LockDelay: -1, Reason: "r"},
		}},
		// Handoffs (fHandoff) and priorities (fPriority).
		{Now: 7, Ops: []Op{
			{Type: OpRelease, Name: "a", Token: 3, Handoff: true},
			{Type: OpRelease, Name: "a", Token: 4, Handoff: true, HandoffTo: "candidate-2", Session: "s", Seq: 3, Floor: 1},
			{Type: OpAcquire, Name: "a", Holder: "h", TTL: sec, Wait: true, Priority: 7},
			{Type: OpAcquire, Name: "a", Holder: "h", TTL: sec, Priority: MaxPriority, LockDelay: sec},
		}},
		// Renewal headroom (version 3) and trims (fAt).
		{Now: 8, Wall: 1, Headroom: 10 * sec, Ops: []Op{
			{Type: OpTrim, Name: "a", Token: 3, At: 12 * sec},
			{Type: OpTrim, Name: "b", Token: 4, At: -1},
		}},
		{Now: 9, Headroom: 1, Ops: []Op{renew(Ref{Name: "a", Token: 1})}},
	}
}

// canonical is what DecodeBatch gives for b: empty Ops and Refs come back
// nil, an empty non-nil Value stays empty and non-nil.
func canonical(b Batch) Batch {
	if len(b.Ops) == 0 {
		b.Ops = nil
		return b
	}
	ops := make([]Op, len(b.Ops))
	copy(ops, b.Ops)
	for i := range ops {
		if len(ops[i].Refs) == 0 {
			ops[i].Refs = nil
		}
	}
	b.Ops = ops
	return b
}

func TestCodecRoundTrip(t *testing.T) {
	for i, b := range codecBatches() {
		enc := EncodeBatch(b)
		got, err := DecodeBatch(enc)
		if err != nil {
			t.Fatalf("batch %d: decode: %v", i, err)
		}
		if want := canonical(b); !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d:\n got  %#v\n want %#v", i, got, want)
		}
		if again := EncodeBatch(got); !bytes.Equal(again, enc) {
			t.Fatalf("batch %d: re-encoding differs:\n%x\n%x", i, again, enc)
		}
		// AppendBatch appends after what is in the buffer.
		prefix := []byte("prefix")
		if app := AppendBatch(prefix, b); !bytes.Equal(app, append([]byte("prefix"), enc...)) {
			t.Fatalf("batch %d: AppendBatch = %x", i, app)
		}
	}
}

func TestCodecNilAndEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Batch
		want Batch
	}{
		{"nil ops", Batch{Now: 1}, Batch{Now: 1}},
		{"empty ops decode as nil", Batch{Now: 1, Ops: []Op{}}, Batch{Now: 1}},
		{"nil value stays nil", Batch{Ops: []Op{{Type: OpPut}}}, Batch{Ops: []Op{{Type: OpPut}}}},
		{"empty value stays empty", Batch{Ops: []Op{{Type: OpPut, Value: []byte{}}}}, Batch{Ops: []Op{{Type: OpPut, Value: []byte{}}}}},
		{"empty refs decode as nil", Batch{Ops: []Op{{Type: OpRenew, Refs: []Ref{}}}}, Batch{Ops: []Op{{Type: OpRenew}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBatch(EncodeBatch(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
			for i := range got.Ops {
				if (got.Ops[i].Value == nil) != (tc.want.Ops[i].Value == nil) {
					t.Fatalf("op %d: Value nil = %v, want %v", i, got.Ops[i].Value == nil, tc.want.Ops[i].Value == nil)
				}
			}
		})
	}
}

// TestCodecSmall keeps the common ops a few bytes long.
func TestCodecSmall(t *testing.T) {
	enc := EncodeBatch(Batch{Now: 1, Ops: []Op{rel("a", 1)}})
	// version, now, count, type, flags, name length, name, token
	if len(enc) != 8 {
		t.Fatalf("release batch is %d bytes: %x", len(enc), enc)
	}
}

// TestDecodeDoesNotAlias: raft may reuse the buffer of a log entry, so the
// decoded batch must not share memory with it.
func TestDecodeDoesNotAlias(t *testing.T) {
	enc := EncodeBatch(Batch{Ops: []Op{{Type: OpPut, Key: "key", Name: "lease", Token: 1, Value: []byte("value")}}})
	b, err := DecodeBatch(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		enc[i] = 'X'
	}
	op := b.Ops[0]
	if op.Key != "key" || op.Name != "lease" || string(op.Value) != "value" {
		t.Fatalf("decoded op changed with its input: %+v", op)
	}
}

func TestDecodeTruncated(t *testing.T) {
	for i, b := range codecBatches() {
		enc := EncodeBatch(b)
		for n := range len(enc) {
			got, err := DecodeBatch(enc[:n])
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("batch %d cut to %d of %d bytes: err %v, batch %+v", i, n, len(enc), err, got)
			}
			if !reflect.DeepEqual(got, Batch{}) {
				t.Fatalf("batch %d cut to %d bytes: a failed decode returned %+v", i, n, got)
			}
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	valid := EncodeBatch(Batch{Now: 1, Ops: []Op{rel("a", 1)}})
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"unknown version", append([]byte{2}, valid[1:]...)},
		{"version 0", append([]byte{0}, valid[1:]...)},
		{"trailing bytes", append(append([]byte(nil), valid...), 0)},
		{"time overflows", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}},
		{"op count beyond the input", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"op count one too many", []byte{1, 0, 2, byte(OpExpire), 0}},
		{"op type 0", []byte{1, 0, 1, 0, 0}},
		{"op type 16", []byte{1, 0, 1, 16, 0}},
		{"unknown flag", []byte{1, 0, 1, byte(OpExpire), 0x80, 0x20}},
		{"ref TTLs without refs", []byte{1, 0, 1, byte(OpRenew), 0x80, 0x08, 2}},
		{"limit missing", []byte{1, 0, 1, byte(OpAcquire), 0x80, 0x10}},
		{"limit too large", []byte{1, 0, 1, byte(OpAcquire), 0x80, 0x10, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"ref TTL missing", []byte{1, 0, 1, byte(OpRenew), 0xc0, 0x08, 1, 1, 'a', 1}},
		{"flags overflow", []byte{1, 0, 1, byte(OpExpire), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"name longer than the input", []byte{1, 0, 1, byte(OpGet), fName, 5, 'a'}},
		{"huge name length", []byte{1, 0, 1, byte(OpGet), fName, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"huge ref count", []byte{1, 0, 1, byte(OpRenew), fRefs, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1}},
		{"ref token missing", []byte{1, 0, 1, byte(OpRenew), fRefs, 1, 1, 'a'}},
		{"value longer than the input", []byte{1, 0, 1, byte(OpPut), 0x80, 0x04, 3, 'a', 'b'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := DecodeBatch(tc.data)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeBatch(%x) = %+v, %v; want ErrCorrupt", tc.data, b, err)
			}
		})
	}
}

// checkDecode is the fuzz property: DecodeBatch does not panic, and what it
// accepts re-encodes to bytes that decode to the same batch and encode
// again to the same bytes.
func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	b, err := DecodeBatch(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeBatch(%x): error %v does not wrap ErrCorrupt", data, err)
		}
		return
	}
	enc := EncodeBatch(b)
	b2, err := DecodeBatch(enc)
	if err != nil {
		t.Fatalf("DecodeBatch(%x) = %+v, but its encoding %x does not decode: %v", data, b, enc, err)
	}
	if !reflect.DeepEqual(canonical(b2), canonical(b)) {
		t.Fatalf("DecodeBatch(%x):\n first  %#v\n second %#v", data, b, b2)
	}
	if enc2 := EncodeBatch(b2); !bytes.Equal(enc2, enc) {
		t.Fatalf("DecodeBatch(%x): re-encodings differ:\n%x\n%x", data, enc, enc2)
	}
	if len(enc) > len(data) {
		t.Fatalf("DecodeBatch(%x): re-encoding %x is longer than the input", data, enc)
	}
}

// TestDecodeMutations runs the fuzz property over every one-byte change of
// the valid encodings, so it runs in every go test, not only under -fuzz.
func TestDecodeMutations(t *testing.T) {
	for _, b := range codecBatches() {
		enc := EncodeBatch(b)
		for i := range enc {
			for _, v := range []byte{0, 1, 2, 0x7f, 0x80, 0xff, enc[i] + 1, enc[i] - 1} {
				m := append([]byte(nil), enc...)
				m[i] = v
				checkDecode(t, m)
			}
			checkDecode(t, append(append(append([]byte(nil), enc[:i]...), 0x80), enc[i:]...))
			checkDecode(t, append(append([]byte(nil), enc[:i]...), enc[i+1:]...))
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, b := range codecBatches() {
		f.Add(EncodeBatch(b))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 1, byte(OpRenew), fRefs, 0})    // refs present but empty
	f.Add([]byte{1, 0, 1, byte(OpGet), fName, 0})      // name present but empty
	f.Add([]byte{1, 0x80, 0x00, 1, byte(OpExpire), 0}) // non-minimal varint
	f.Add(EncodeBatch(Batch{Now: time.Hour, Ops: []Op{{Type: OpPut, Value: []byte{}}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

// goldenBatches are the encodings of the first codecBatches as the codec
// wrote them before any field was added to the format (renewal TTLs).
// Raft logs hold such entries forever: they must decode to the same
// batches, and those batches must encode to the same bytes.
var goldenBatches = []string{
	"010000",
	"010200",
	"01ffc7afa02500",
	"01feffffffffffffffff01010400",
	"01ffffffffffffffffff01010600",
	"0180e08bb4590301070a64622f7072696d617279066e6f64652d318090dfc04a01370a64622f7072696d617279066e6f64652d328090dfc04a80b09dc2df0101170177016880a8d6b907",
	"01060b0240030161010162ffffffffffffffffff0100070309016101040005010161068001046170702f078906016101016b0176078906016101016b00078906016101016b0300ff0a088002016b098902016101016b0a0301610168",
	"01000101ff0709e697a5e69cace8aa9e8201686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868686868680180808080808080808001ffffffffffffffffff01010172000170010003070707",
}

// goldenLater are the encodings of the later codecBatches (renewal TTLs
// to lock-delays) as the codec wrote them before handoffs existed, and
// then of the handoff batch and the headroom batches: a batch that does
// not use a field must encode exactly as before the field was added.
var goldenLater = []string{
	"01080202c0080201610101620280b09dc2df010002c00c01016303017601",
	"0100020b000b8001087265706f7274732f",
	"010a02018710046a6f6273016880a8d6b9070301b710046a6f6273016880a8d6b90780a8d6b907e807",
	"010c040c81800101610c737475636b20776f726b65720c89e001016109036f70730173020102c3bc018780020161016880a8d6b90780d88ee16f019790030161016880a8d6b90702017201",
	"010e0403898008016103000389c008016104017303010b63616e6469646174652d32019780100161016880a8d6b90707018780120161016880a8d6b90780a8d6b907c0843d",
	"0310028090dfc04a020f89802001610380e08bb4590f89802001620401",
	"0312000201024001016101",
}

func TestCodecGoldenLater(t *testing.T) {
	batches := codecBatches()[len(goldenBatches):]
	if len(batches) != len(goldenLater) {
		t.Fatalf("%d later batches, %d goldens", len(batches), len(goldenLater))
	}
	for i, h := range goldenLater {
		enc, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBatch(enc)
		if err != nil {
			t.Fatalf("golden batch %d: decode: %v", i, err)
		}
		if want := canonical(batches[i]); !reflect.DeepEqual(got, want) {
			t.Fatalf("golden batch %d:\n got  %#v\n want %#v", i, got, want)
		}
		if again := EncodeBatch(batches[i]); !bytes.Equal(again, enc) {
			t.Fatalf("golden batch %d: encodes to\n%x\nwant\n%x", i, again, enc)
		}
	}
}

func TestCodecGolden(t *testing.T) {
	batches := codecBatches()
	for i, h := range goldenBatches {
		enc, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBatch(enc)
		if err != nil {
			t.Fatalf("golden batch %d: decode: %v", i, err)
		}
		if want := canonical(batches[i]); !reflect.DeepEqual(got, want) {
			t.Fatalf("golden batch %d:\n got  %#v\n want %#v", i, got, want)
		}
		if again := EncodeBatch(got); !bytes.Equal(again, enc) {
			t.Fatalf("golden batch %d: encodes to\n%x\nwant\n%x", i, again, enc)
		}
	}
}
