package redisscript

import (
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
	// The history entry (cmsgpack.pack('e', now, node, ID)) and the spec
	// (after Seq, then now as P_ENQ) are packed into x first.
	x := make([]byte, 0, 64+len(p.Node)+2*len(id)+len(kind)+len(queue)+len(in.Args))
	x = appendMsgpackInt(append(x, 0xa1, 'e'), now)
	x = appendMsgpackStr(x, p.Node)
	x = appendMsgpackStr(x, id)
	h0 := len(x)
	x = appendMsgpackInt(appendSpec(x, in), now)
	b := make([]byte, 0, 256+len(x)+8*len(pre)+6*len(kind)+4*len(queue)+2*len(lane)+len(tail)+3*len(id))
	b = appendMsgpackStr(b, id)
	b = appendStrs(b, pre, "ctr")
	b = appendStrs(b, pre, "hist")
	var msb [20]byte
	b = appendMsgpackStr(b, strconv.AppendInt(msb[:0], floorDiv(now, 1000), 10))
	b = appendMsgpackStr(b, x[:h0])
	b = appendMsgpackStr(b, x[h0:])
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
