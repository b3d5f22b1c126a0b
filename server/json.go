package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec is the API's JSON (Connect's "json" codec, used for
// Content-Type application/json). It names fields as the .proto file
// and the CLI's -o json do (node_id, not nodeId); requests may use either
// spelling. Other rules are protobuf's JSON mapping, which the CLI's
// output differs from in two ways (documented in docs/cli.md): 64-bit
// integers (tokens, revisions, indexes) are strings, and durations have
// 0, 3, 6 or 9 fractional digits ("4.980s", where the CLI says "4.98s").
type jsonCodec struct{}

var (
	jsonMarshal   = protojson.MarshalOptions{UseProtoNames: true}
	jsonUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
)

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("server: cannot marshal %T as JSON", m)
	}
	data, err := jsonMarshal.Marshal(pm)
	if err != nil {
		return nil, err
	}
	return compactJSON(data), nil
}

// compactJSON removes the spaces protojson puts, on purpose at random
// (it varies from one build to the next), after some colons and commas:
// the API's JSON is the same from every build, as the docs show it.
func compactJSON(data []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(data))
	if err := json.Compact(&b, data); err != nil {
		return data
	}
	return b.Bytes()
}

func (jsonCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("server: cannot unmarshal JSON into %T", m)
	}
	if len(data) == 0 {
		return errors.New("server: an empty body is not a JSON object")
	}
	return jsonUnmarshal.Unmarshal(data, pm)
}
