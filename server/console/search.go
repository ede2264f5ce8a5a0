package console

import (
	"context"
	"slices"
	"strconv"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// searchInfo is what the Instances page says of a text search: how many
// instances the server has searched so far (across Next pages), of how
// many the rest of the filter selects when the counts can tell, and
// whether more remain.
type searchInfo struct {
	Searched int64
	Of       int64 // 0: unknown (the counts cannot tell for this filter)
	More     bool
}

// searchProgress reports a search's progress. The total comes from the
// store's counters (ListQueues, ListKinds: no scan), which know a queue's
// or a kind's instances by state, so it is known for a filter of at most
// one of kind and queue, with no labels and no time range.
func (c *Console) searchProgress(ctx context.Context, api *clients, f filterForm, searched int64, more bool) searchInfo {
	info := searchInfo{Searched: searched, More: more}
	if f.Labels != "" || f.From != "" || f.To != "" || (f.Kind != "" && f.Queue != "") {
		return info
	}
	var counts []*pb.StateCounts
	if f.Kind != "" {
		res, err := api.queues.ListKinds(ctx, connect.NewRequest(&pb.ListKindsRequest{}))
		if err != nil {
			return info
		}
		for _, k := range res.Msg.GetKinds() {
			if k.GetName() == f.Kind {
				counts = append(counts, k.GetCounts())
			}
		}
	} else {
		res, err := api.queues.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{}))
		if err != nil {
			return info
		}
		for _, q := range res.Msg.GetQueues() {
			if f.Queue == "" || q.GetName() == f.Queue {
				counts = append(counts, q.GetCounts())
			}
		}
	}
	for _, n := range counts {
		byState := map[string]int64{"created": n.GetCreated(), "scheduled": n.GetScheduled(), "processing": n.GetProcessing(),
			"completed": n.GetCompleted(), "terminated": n.GetTerminated(), "canceled": n.GetCanceled(), "timed_out": n.GetTimedOut()}
		for st, v := range byState {
			if len(f.States) == 0 || slices.Contains(f.States, st) {
				info.Of += v
			}
		}
	}
	return info
}

// atoiOr reads a decimal count from a URL, or def when there is none.
func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return n
	}
	return def
}
