package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSON is the JSON codec of the Connect protocol and gRPC-Web with
// JSON, registered under both names connect-go uses ("json" and "json;
// charset=utf-8"). Unlike connect-go's own it refuses a field the message
// does not have (InvalidArgument naming the field), so a misspelt option
// ("max_retry") is an error rather than silently ignored. Binary protobuf
// keeps proto's rules: unknown fields are skipped, so old servers accept
// requests of newer clients there.
type strictJSON struct{ name string }

// Name is the codec's content subtype.
func (c strictJSON) Name() string { return c.name }

// IsBinary reports false: JSON is text.
func (c strictJSON) IsBinary() bool { return false }

// Marshal encodes a message as protojson does.
func (c strictJSON) Marshal(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("server: JSON codec: %T is not a proto.Message", msg)
	}
	return protojson.Marshal(m)
}

// MarshalStable encodes a message as Marshal does, compacted, for GET
// requests' stable URLs.
func (c strictJSON) MarshalStable(msg any) ([]byte, error) {
	b, err := c.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Unmarshal decodes a message, refusing unknown fields.
func (c strictJSON) Unmarshal(data []byte, msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("server: JSON codec: %T is not a proto.Message", msg)
	}
	if len(data) == 0 {
		return errors.New("empty JSON body; send a JSON object ({} for no fields)")
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(data, m); err != nil {
		return fmt.Errorf("the JSON body does not fit %s: %w (field names are those of the .proto file or their lowerCamelCase JSON names)", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}
