package wire

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jobkit/job/store"
)

// Msgpack names the binary encoding of a session (Hello.encodings,
// Welcome.encoding): MessagePack of the same Go types JSON carries, with
// their JSON field names. A session's hot messages (pushed tasks, claims,
// outcomes, renewals, heartbeats) cost far less to encode and decode in it
// than in JSON, and bytes and strings travel as they are, so a string
// that is not valid UTF-8 reaches the store, which refuses it as it would
// locally.
const Msgpack = "msgpack"

// MarshalMsgpack encodes v in the session encoding Msgpack.
func MarshalMsgpack(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// UnmarshalMsgpack decodes b, encoded by MarshalMsgpack, into v.
func UnmarshalMsgpack(b []byte, v any) error {
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(b))
	dec.SetCustomStructTag("json")
	return dec.Decode(v)
}

// DecodeMsgpack is Decode for parameters encoded by MarshalMsgpack.
func DecodeMsgpack(name string, params []byte) (any, error) {
	m, ok := methods[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: %w (this jobd may be older than the worker's jobkit; upgrade jobd)", ErrUnknownMethod, name, store.ErrInvalid)
	}
	return m.decodeMsgpack(params)
}
