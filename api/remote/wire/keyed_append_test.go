package wire

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The tests build MessagePack by hand (values a newer peer might send)
// with these, which append one value to b through msgpack's Encoder.

func appendWith(b []byte, encode func(*msgpack.Encoder) error) []byte {
	w := &appender{b: b}
	if err := encode(msgpack.NewEncoder(w)); err != nil {
		panic(err)
	}
	return w.b
}

func appendStr(b []byte, s string) []byte {
	return appendWith(b, func(e *msgpack.Encoder) error { return e.EncodeString(s) })
}

func appendBin(b []byte, v []byte) []byte {
	return appendWith(b, func(e *msgpack.Encoder) error { return e.EncodeBytes(v) })
}

func appendInt(b []byte, v int64) []byte {
	return appendWith(b, func(e *msgpack.Encoder) error { return e.EncodeInt(v) })
}

func appendTime(b []byte, t time.Time) []byte {
	return appendWith(b, func(e *msgpack.Encoder) error { return e.EncodeTime(t) })
}
