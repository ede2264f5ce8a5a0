package redisscript

import (
	"math"

	"github.com/jobkit/job/store"
)

// The appenders below write into a caller's buffer what the packer
// writes through msgpack's Encoder (see packer), byte for byte, for the
// enqueue's per-instance values: a batch of 1,000 packs them into one
// buffer instead of a pooled packer, an Encoder's calls and a string per
// instance.

// appendMsgpackInt appends v as msgpack's Encoder.EncodeInt writes it:
// a positive or negative fixint, or the smallest of uint 8/16/32/64 when
// v is not negative and of int 8/16/32/64 when it is.
func appendMsgpackInt(b []byte, v int64) []byte {
	if v >= 0 {
		switch u := uint64(v); {
		case u <= math.MaxInt8:
			return append(b, byte(u))
		case u <= math.MaxUint8:
			return append(b, 0xcc, byte(u))
		case u <= math.MaxUint16:
			return append(b, 0xcd, byte(u>>8), byte(u))
		case u <= math.MaxUint32:
			return append(b, 0xce, byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
		default:
			return append(b, 0xcf, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32), byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
		}
	}
	switch {
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, 0xd3, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// appendSpec appends what EncodeSpec returns for in.
func appendSpec(b []byte, in *store.Instance) []byte {
	b = appendMsgpackStr(b, in.Kind)
	b = appendMsgpackStr(b, in.Queue)
	b = appendMsgpackStr(b, string(in.Args))
	b = appendMsgpackInt(b, int64(in.Priority))
	b = appendMsgpackInt(b, Micros(in.RunAt))
	b = appendMsgpackInt(b, int64(in.MaxRetries))
	b = appendMsgpackInt(b, int64(in.Timeout))
	b = appendMsgpackStr(b, in.UniqueKey)
	b = appendMsgpackInt(b, Micros(in.UniqueUntil))
	return appendMsgpackInt(b, Micros(in.CreatedAt))
}

// appendID appends what EncodeID returns for id.
func appendID(b []byte, id string) []byte {
	if u, ok := parseUUID(id); ok {
		b = append(b, idUUID)
		return append(b, u[:]...)
	}
	b = append(b, idText)
	return append(b, id...)
}

// appendBE7 appends what be7 returns for us.
func appendBE7(b []byte, us int64) []byte {
	if us < 0 {
		us = 0
	}
	return append(b, byte(us>>48), byte(us>>40), byte(us>>32), byte(us>>24), byte(us>>16), byte(us>>8), byte(us))
}
