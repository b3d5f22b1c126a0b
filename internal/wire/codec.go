package wire

import (
	"slices"

	"google.golang.org/protobuf/proto"
)

// The messages of gen/tenure/v1 also have the encoders vtprotobuf
// generates (tenure_vtproto.pb.go): plain code for each message, without
// the reflection of proto.Marshal and proto.Unmarshal and with fewer
// allocations. The batch connection's frames use them; what they write
// decodes as proto.Marshal's bytes do.

type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

type vtUnmarshaler interface {
	UnmarshalVT([]byte) error
}

// AppendMarshal appends the encoding of msg to b, as
// proto.MarshalOptions.MarshalAppend does.
func AppendMarshal(b []byte, msg proto.Message) ([]byte, error) {
	m, ok := msg.(vtMarshaler)
	if !ok {
		return proto.MarshalOptions{}.MarshalAppend(b, msg)
	}
	n := m.SizeVT()
	b = slices.Grow(b, n)
	if _, err := m.MarshalToSizedBufferVT(b[len(b) : len(b)+n]); err != nil {
		return b, err
	}
	return b[:len(b)+n], nil
}

// Size returns the length of msg's encoding, as proto.Size does.
func Size(msg proto.Message) int {
	if m, ok := msg.(vtMarshaler); ok {
		return m.SizeVT()
	}
	return proto.Size(msg)
}

// UnmarshalAnswer decodes b, a server's answer, into msg, as
// proto.Unmarshal does, but for one thing: it may take strings that are
// not UTF-8 (the generated decoders do not check them), which a server
// never sends. A server decodes its requests with proto.Unmarshal, which
// refuses them.
func UnmarshalAnswer(b []byte, msg proto.Message) error {
	m, ok := msg.(vtUnmarshaler)
	if !ok {
		return proto.Unmarshal(b, msg)
	}
	proto.Reset(msg)
	return m.UnmarshalVT(b)
}
