package redisscript

import (
	"strconv"

	"github.com/jobkit/job/store"
)

// EnqueueOneArgs returns the arguments of lua/enqueue_one.lua (from
// ARGV[2], after the namespace prefix) for p when p is a call the lean
// script stores as Enqueue would: one instance, due at once (its RunAt at
// or before the later of p.Now and its CreatedAt, as EnqueueArgs judges
// it), without a unique key. ok is false for any other call (send it with
// EnqueueArgs), and err is p's validation error.
//
// The values are packed into one buffer and cut from one string: with
// the slice that holds them, two allocations for the call's arguments.
func EnqueueOneArgs(p *store.EnqueueParams) (args []string, ok bool, err error) {
	all, ok, err := enqueueOneArgs("", p)
	if !ok || err != nil {
		return nil, ok, err
	}
	return all[1:], true, nil
}

// enqueueOneArgs is EnqueueOneArgs with the whole ARGV: prefix first.
func enqueueOneArgs(prefix string, p *store.EnqueueParams) (args []string, ok bool, err error) {
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
	// Into b, in order: now, the ID, the history entry (its header,
	// then the ID as cmsgpack packs it), the spec, be(RunAt, 7), the
	// priority, the second of CreatedAt and the bucket part (the ID
	// behind its length in 2 bytes).
	b := make([]byte, 0, 160+len(p.Node)+3*len(in.ID)+len(in.Kind)+len(in.Queue)+len(in.Args))
	b = strconv.AppendInt(b, now, 10)
	i0 := len(b)
	b = appendID(b, in.ID)
	e0 := len(b)
	id := b[i0:e0:e0]
	b = appendMsgpackInt(append(b, 0xa1, 'e'), now)
	b = appendMsgpackStr(b, p.Node)
	b = appendMsgpackStr(b, id)
	s0 := len(b)
	b = appendSpec(b, in)
	r0 := len(b)
	b = appendBE7(b, runat)
	p0 := len(b)
	b = strconv.AppendInt(b, int64(in.Priority), 10)
	c0 := len(b)
	b = strconv.AppendInt(b, floorDiv(created, 1_000_000), 10)
	k0 := len(b)
	b = append(b, byte(len(id)>>8), byte(len(id)))
	b = append(b, id...)
	all := string(b)
	return []string{
		prefix,
		all[:i0],   // now
		all[e0:s0], // the history entry
		all[i0:e0], // the ID
		all[s0:r0], // the spec
		tail,       // the spec's tail
		all[r0:p0], // be(RunAt, 7)
		in.Kind,
		in.Queue,
		all[p0:c0], // the priority
		lane,       // the labels
		all[c0:k0], // the second of CreatedAt
		all[k0:],   // the bucket part
	}, true, nil
}
