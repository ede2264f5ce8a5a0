package redisscript

import (
	"slices"
	"strconv"

	"github.com/jobkit/job/store"
)

// EnqueueOneArgs returns the arguments of lua/enqueue_one.lua (its one
// ARGV value) for p when p is a call the lean script stores as Enqueue
// would: one instance, due at once (its RunAt at or before the later of
// p.Now and its CreatedAt, as EnqueueArgs judges it), without a unique
// key. ok is false for any other call (send it with EnqueueArgs), and
// err is p's validation error. keys are the namespace's.
func EnqueueOneArgs(keys Keys, p *store.EnqueueParams) (args []string, ok bool, err error) {
	return enqueueOneArgs(keys, p)
}

// enqueueOneArgs packs the values lua/enqueue_one.lua unpacks, in its
// order, as MessagePack strings into one buffer: with the slice that
// holds it, two allocations for the call's arguments.
func enqueueOneArgs(keys Keys, p *store.EnqueueParams) (args []string, ok bool, err error) {
	if p == nil || len(p.Instances) != 1 || p.Instances[0] == nil {
		return nil, false, nil
	}
	in := p.Instances[0]
	now, runat, created := Micros(p.Now), Micros(in.RunAt), Micros(in.CreatedAt)
	if in.UniqueKey != "" || runat > max(now, created) {
		return nil, false, nil
	}
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	lane := laneLabels(in.Labels)
	tail := specTail(lane, encodeMetadata(in.Metadata), encodeShard(in), encodeTask(in))
	pre, kind, queue := keys.Prefix, in.Kind, in.Queue
	var idb [64]byte
	id := appendID(idb[:0], in.ID)
	var secb, prib, klb [20]byte
	sec := strconv.AppendInt(secb[:0], floorDiv(created, 1_000_000), 10)
	prio := strconv.AppendInt(prib[:0], int64(in.Priority), 10)
	klen := strconv.AppendInt(klb[:0], int64(len(kind)), 10)
	b := make([]byte, 0, 160+len(p.Node)+4*len(id)+8*len(pre)+6*len(kind)+5*len(queue)+len(in.Args)+2*len(lane)+len(tail))
	b = appendMsgpackStr(b, id)
	b = appendStrs(b, pre, "ctr")
	b = appendStrs(b, pre, "hist")
	var msb [20]byte
	b = appendMsgpackStr(b, strconv.AppendInt(msb[:0], floorDiv(now, 1000), 10))
	// The history entry (cmsgpack.pack('e', now, node, ID)), then the
	// spec (after Seq) and now (P_ENQ): each a str 16 whose length is
	// written once it is packed (cmsgpack reads any width).
	h := len(b)
	b = append(b, 0xda, 0, 0)
	b = appendMsgpackInt(append(b, 0xa1, 'e'), now)
	b = appendMsgpackStr(b, p.Node)
	b = appendMsgpackStr(b, id)
	b = endStr16(b, h)
	h = len(b)
	b = append(b, 0xda, 0, 0)
	b = appendMsgpackInt(appendSpec(b, in), now)
	b = endStr16(b, h)
	b = appendMsgpackStr(b, tail)
	b = appendStrs(b, pre, "kb:", kind, ":", string(sec))
	// The bucket part: the ID behind its length in 2 bytes.
	b = appendMsgpackLen(b, 2+len(id))
	b = append(b, byte(len(id)>>8), byte(len(id)))
	b = append(b, id...)
	b = appendMsgpackStr(b, sec)
	b = appendStrs(b, pre, "kn:", kind)
	b = appendStrs(b, pre, "cnt")
	// count_field(S_SCHEDULED, queue, kind).
	b = appendMsgpackLen(b, 3+len(queue)+len(kind))
	b = append(b, '2', byte(len(queue)>>8), byte(len(queue)))
	b = append(b, queue...)
	b = append(b, kind...)
	b = appendStrs(b, pre, "w:", queue)
	b = appendStrs(b, pre, "q:", queue, ":r:", string(prio), "/", string(klen), ":", kind, lane)
	var r7 [7]byte
	b = appendMsgpackStr(b, appendBE7(r7[:0], runat))
	b = appendMsgpackStr(b, pre)
	b = appendMsgpackStr(b, kind)
	b = appendMsgpackStr(b, queue)
	b = appendMsgpackStr(b, prio)
	b = appendMsgpackStr(b, lane)
	return []string{string(b)}, true, nil
}

// endStr16 ends the str 16 whose header starts b[h:] (the rest of b):
// it writes its length, or rewrites it as a wider str when it is longer
// than 64 KiB (an instance's large arguments).
func endStr16(b []byte, h int) []byte {
	n := len(b) - h - 3
	if n > 0xffff {
		return appendMsgpackStr(b[:h], slices.Clone(b[h+3:]))
	}
	b[h+1], b[h+2] = byte(n>>8), byte(n)
	return b
}

// appendStrs appends the concatenation of parts as one MessagePack str.
func appendStrs(b []byte, parts ...string) []byte {
	n := 0
	for _, s := range parts {
		n += len(s)
	}
	b = appendMsgpackLen(b, n)
	for _, s := range parts {
		b = append(b, s...)
	}
	return b
}

// appendMsgpackLen appends the header of a MessagePack str of n bytes, as
// appendMsgpackStr writes it.
func appendMsgpackLen(b []byte, n int) []byte {
	switch {
	case n < 32:
		return append(b, 0xa0|byte(n))
	case n <= 0xff:
		return append(b, 0xd9, byte(n))
	case n <= 0xffff:
		return append(b, 0xda, byte(n>>8), byte(n))
	}
	return append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}
