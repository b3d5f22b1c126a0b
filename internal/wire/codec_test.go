package wire_test

import (
	"bufio"
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"pgregory.net/rapid"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/wire"
)

// The generated encoders agree with proto's for every message of
// tenure.proto, with any fields set: what AppendMarshal writes after a
// prefix decodes with proto.Unmarshal to the message, Size is proto.Size,
// and UnmarshalAnswer decodes proto.Marshal's bytes to the message, also
// into a message that held something else.
func TestCodecAsProtoDoes(t *testing.T) {
	var types []protoreflect.MessageType
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if mt.Descriptor().ParentFile().Package() == "tenure.v1" {
			types = append(types, mt)
		}
		return true
	})
	if len(types) < 20 {
		t.Fatalf("found %d messages of tenure.v1", len(types))
	}
	rapid.Check(t, func(t *rapid.T) {
		mt := rapid.SampledFrom(types).Draw(t, "type")
		msg := mt.New()
		fill(t, msg, 0)
		m := msg.Interface()

		prefix := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "prefix")
		b, err := wire.AppendMarshal(bytes.Clone(prefix), m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[:len(prefix)], prefix) {
			t.Fatalf("prefix %x became %x", prefix, b[:len(prefix)])
		}
		if got, want := wire.Size(m), proto.Size(m); got != want || len(b)-len(prefix) != want {
			t.Fatalf("Size %d, wrote %d bytes; proto.Size %d", got, len(b)-len(prefix), want)
		}
		back := mt.New().Interface()
		if err := proto.Unmarshal(b[len(prefix):], back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(back, m) {
			t.Fatalf("wrote %v, read back %v", m, back)
		}

		enc, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		into := mt.New()
		fill(t, into, 0)
		if err := wire.UnmarshalAnswer(enc, into.Interface()); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(into.Interface(), m) {
			t.Fatalf("decoded %v, want %v", into.Interface(), m)
		}
	})
}

// fill sets a random subset of msg's fields to random values.
func fill(t *rapid.T, msg protoreflect.Message, depth int) {
	fields := msg.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !rapid.Bool().Draw(t, "set") {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && msg.WhichOneof(od) != nil {
			continue
		}
		switch {
		case fd.IsList():
			l := msg.Mutable(fd).List()
			for range rapid.IntRange(0, 3).Draw(t, "len") {
				if fd.Kind() == protoreflect.MessageKind {
					if depth > 3 {
						break
					}
					v := l.NewElement()
					fill(t, v.Message(), depth+1)
					l.Append(v)
				} else {
					l.Append(scalar(t, fd))
				}
			}
		case fd.IsMap():
			m := msg.Mutable(fd).Map()
			for range rapid.IntRange(0, 3).Draw(t, "len") {
				k := scalar(t, fd.MapKey()).MapKey()
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v := m.NewValue()
					fill(t, v.Message(), depth+1)
					m.Set(k, v)
				} else {
					m.Set(k, scalar(t, fd.MapValue()))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth > 3 {
				continue
			}
			fill(t, msg.Mutable(fd).Message(), depth+1)
		default:
			msg.Set(fd, scalar(t, fd))
		}
	}
}

// scalar returns a random value of fd's kind (not a message).
func scalar(t *rapid.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rapid.Bool().Draw(t, "bool"))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(rapid.Int32Range(-1, 5).Draw(t, "enum")))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(rapid.Int32().Draw(t, "int32"))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(rapid.Int64().Draw(t, "int64"))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(rapid.Uint32().Draw(t, "uint32"))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(rapid.Uint64().Draw(t, "uint64"))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(rapid.Float32().Draw(t, "float32"))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(rapid.Float64().Draw(t, "float64"))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(rapid.StringN(0, 12, -1).Draw(t, "string"))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, "bytes"))
	}
	t.Fatalf("field %s: kind %v", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}

// A frame's payload written by Write is the message's encoding.
func TestWriteMarshalsTheMessage(t *testing.T) {
	msg := &tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "a", Token: 7}}}}}
	var buf bytes.Buffer
	if err := wire.NewFrameWriter(&buf).Write(3, wire.FrameBatch, msg); err != nil {
		t.Fatal(err)
	}
	_, _, payload, err := wire.ReadFrame(bufio.NewReader(&buf), nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got := new(tenurev1.BatchRequest)
	if err := proto.Unmarshal(payload, got); err != nil || !proto.Equal(got, msg) {
		t.Fatalf("payload decodes to %v (%v), want %v", got, err, msg)
	}
}
