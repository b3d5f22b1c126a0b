package wire_test

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/tenure-io/tenure/internal/wire"
)

// Frames written by WriteEncoded read back as they were written, with
// headers of every length, between frames written by Write.
func TestWriteEncodedFrames(t *testing.T) {
	var out bytes.Buffer
	fw := wire.NewFrameWriter(&out)
	type frame struct {
		id      uint64
		kind    byte
		payload []byte
	}
	var want []frame
	for i, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 70000} {
		f := frame{id: uint64(1) << (i * 9), kind: byte(i), payload: bytes.Repeat([]byte{byte(i + 1)}, n)}
		want = append(want, f)
		if err := fw.WriteEncoded(f.id, f.kind, func(b []byte) ([]byte, error) { return append(b, f.payload...), nil }); err != nil {
			t.Fatal(err)
		}
		if err := fw.Write(f.id+1, wire.FrameCancel, nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, frame{id: f.id + 1, kind: wire.FrameCancel, payload: []byte{}})
	}
	r := bufio.NewReader(&out)
	for _, w := range want {
		id, kind, payload, err := wire.ReadFrame(r, nil, 1<<20)
		if err != nil {
			t.Fatalf("frame %d: %v", w.id, err)
		}
		if id != w.id || kind != w.kind || !bytes.Equal(payload, w.payload) {
			t.Fatalf("read frame %d kind %d with %d bytes, want %d kind %d with %d bytes", id, kind, len(payload), w.id, w.kind, len(w.payload))
		}
	}
	if out.Len() != 0 || r.Buffered() != 0 {
		t.Fatalf("%d bytes left after the frames", out.Len()+r.Buffered())
	}
}
