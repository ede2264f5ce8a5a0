package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// MaxBatchItems is the most items a ScheduleBatch call takes.
const MaxBatchItems = 1000

// jobService implements jobkitv1connect.JobServiceHandler on the
// namespace's manager.
type jobService struct{ s *Server }

// scheduleOptions turns a ScheduleRequest into ScheduleJob's kind and
// options. Every field maps to the option of the same name in package job.
func scheduleOptions(req *pb.ScheduleRequest) (string, []job.ScheduleOption, error) {
	if req.GetKind() == "" {
		return "", nil, fmt.Errorf("%w: kind is required; name the job kind to schedule", store.ErrInvalid)
	}
	var opts []job.ScheduleOption
	args, err := parseArgs(req.GetArgsJson())
	if err != nil {
		return "", nil, err
	}
	if len(args) > 0 {
		opts = append(opts, job.WithArguments(args...))
	}
	runAt, err := fromTS("run_at", req.GetRunAt())
	if err != nil {
		return "", nil, err
	}
	delay, err := fromDur("delay", req.GetDelay())
	if err != nil {
		return "", nil, err
	}
	switch {
	case !runAt.IsZero() && req.GetDelay() != nil:
		return "", nil, fmt.Errorf("%w: both run_at and delay are set; send one of them", store.ErrInvalid)
	case !runAt.IsZero():
		opts = append(opts, job.WithScheduleAt(runAt))
	case delay > 0:
		opts = append(opts, job.WithScheduleAfter(delay))
	}
	jit, err := fromDur("jitter", req.GetJitter())
	if err != nil {
		return "", nil, err
	}
	if jit > 0 {
		opts = append(opts, job.WithJitter(jit))
	}
	if k := req.GetIdempotencyKey(); k != "" {
		opts = append(opts, job.WithIdempotencyKey(k))
	}
	ttl, err := fromDur("unique_ttl", req.GetUniqueTtl())
	if err != nil {
		return "", nil, err
	}
	switch {
	case req.GetUniqueKey() != "":
		opts = append(opts, job.WithUniqueKey(req.GetUniqueKey(), ttl))
	case req.GetUniqueTtl() != nil:
		return "", nil, fmt.Errorf("%w: unique_ttl without unique_key; send the key too, or drop the TTL", store.ErrInvalid)
	}
	if req.Priority != nil {
		opts = append(opts, job.WithPriority(job.Priority(req.GetPriority())))
	}
	if req.MaxRetries != nil {
		opts = append(opts, job.WithMaxRetries(int(req.GetMaxRetries())))
	}
	if req.GetTimeout() != nil {
		d, err := fromDur("timeout", req.GetTimeout())
		if err != nil {
			return "", nil, err
		}
		opts = append(opts, job.WithTimeout(d))
	}
	if q := req.GetQueue(); q != "" {
		opts = append(opts, job.WithQueue(q))
	}
	opts = append(opts, metadataOptions(req.GetMetadata())...)
	if n := req.GetShards(); n != 0 {
		opts = append(opts, job.WithShards(int(n)))
	}
	return req.GetKind(), opts, nil
}

// scheduleRequest schedules one request on m.
func scheduleRequest(ctx context.Context, m *job.Manager, req *pb.ScheduleRequest) (*pb.Instance, error) {
	kind, opts, err := scheduleOptions(req)
	if err != nil {
		return nil, err
	}
	ji, err := m.ScheduleJob(ctx, kind, opts...)
	if err != nil {
		return nil, err
	}
	return instanceToProto(ji), nil
}

// Schedule implements JobService.Schedule.
func (h jobService) Schedule(ctx context.Context, req *connect.Request[pb.ScheduleRequest]) (*connect.Response[pb.ScheduleResponse], error) {
	inst, err := scheduleRequest(ctx, managerOf(ctx), req.Msg)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.ScheduleResponse{Instance: inst}), nil
}

// ScheduleBatch implements JobService.ScheduleBatch.
func (h jobService) ScheduleBatch(ctx context.Context, req *connect.Request[pb.ScheduleBatchRequest]) (*connect.Response[pb.ScheduleBatchResponse], error) {
	items := req.Msg.GetItems()
	if len(items) > MaxBatchItems {
		return nil, invalid(fmt.Sprintf("%d items in one batch; send at most %d per call", len(items), MaxBatchItems))
	}
	results, err := scheduleBatch(ctx, managerOf(ctx), items)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.ScheduleBatchResponse{Results: results}), nil
}

// scheduleBatch schedules items on m with one Manager.ScheduleJobs call
// (one atomic store call per job.MaxScheduleBatch items), one result per
// item in order; an item that fails stores nothing and gets its error, the
// others go on. It returns an error only when ctx ends.
func scheduleBatch(ctx context.Context, m *job.Manager, items []*pb.ScheduleRequest) ([]*pb.ScheduleBatchResult, error) {
	out := make([]*pb.ScheduleBatchResult, len(items))
	batch := make([]job.BatchItem, 0, len(items))
	at := make([]int, 0, len(items)) // batch index -> item index
	for i, it := range items {
		kind, opts, err := scheduleOptions(it)
		if err != nil {
			out[i] = batchResult(nil, it.GetKind(), err)
			continue
		}
		batch = append(batch, job.BatchItem{Kind: kind, Options: opts})
		at = append(at, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	res, err := m.ScheduleJobs(ctx, batch...)
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	for j, r := range res {
		if r.Err != nil {
			out[at[j]] = batchResult(nil, batch[j].Kind, r.Err)
			continue
		}
		out[at[j]] = batchResult(instanceToProto(r.Instance), "", nil)
	}
	return out, nil
}

// batchResult is one item's result: the instance, or the error as the code
// and message a call of its own would have answered, less the engine's
// `job: schedule "<kind>": `: an item's error is read beside its kind.
func batchResult(inst *pb.Instance, kind string, err error) *pb.ScheduleBatchResult {
	if err == nil {
		return &pb.ScheduleBatchResult{Instance: inst}
	}
	unknown := errors.Is(err, store.ErrOutcomeUnknown)
	var ce *connect.Error
	if !errors.As(toConnect(err), &ce) {
		return &pb.ScheduleBatchResult{Error: &pb.ItemError{Code: connect.CodeInternal.String(), Message: err.Error(), OutcomeUnknown: unknown}}
	}
	msg := ce.Message()
	if rest, ok := strings.CutPrefix(msg, fmt.Sprintf("job: schedule %q: ", kind)); ok {
		msg = rest
	}
	ie := &pb.ItemError{Code: ce.Code().String(), Message: msg, OutcomeUnknown: unknown}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if f, ok := v.(*pb.ErrorFix); ok {
				ie.Fix = f
			}
		}
	}
	return &pb.ScheduleBatchResult{Error: ie}
}

// GetInstance implements JobService.GetInstance.
func (h jobService) GetInstance(ctx context.Context, req *connect.Request[pb.GetInstanceRequest]) (*connect.Response[pb.GetInstanceResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id is required; send the instance's ID")
	}
	ji, err := managerOf(ctx).GetInstance(ctx, req.Msg.GetId())
	if err == nil {
		err = managerOf(ctx).ResolveDependsOn(ctx, ji) // a wide join's own dependencies, not its fan-in gates
	}
	if err != nil {
		return nil, toConnect(err)
	}
	in := instanceToProto(ji)
	if err := fillProgress(ctx, managerOf(ctx), in); err != nil {
		return nil, toConnect(err)
	}
	res := &pb.GetInstanceResponse{Instance: in}
	if ji.State == job.Scheduled {
		ex, err := managerOf(ctx).ExplainWaiting(ctx, ji.ID)
		if err != nil {
			return nil, toConnect(err)
		}
		if ex.Reason != job.WaitNotWaiting { // claimed since the lookup
			res.Waiting = waitingToProto(ex)
			if ex.Reason == job.WaitQueuePaused { // the engine's message names a Go call
				res.Waiting.Message = fmt.Sprintf("queue %q is paused; resume it (QueueService.ResumeQueue) to run its instances", ji.Queue)
			}
		}
	}
	return connect.NewResponse(res), nil
}

// waitingToProto converts what Manager.ExplainWaiting says.
func waitingToProto(ex *job.WaitExplanation) *pb.WaitExplanation {
	out := &pb.WaitExplanation{Reason: string(ex.Reason), Message: ex.Message, MatchingNodes: ex.Matching}
	for _, u := range ex.Unmatched {
		out.UnmatchedNodes = append(out.UnmatchedNodes, &pb.NodeMismatch{Node: u.Node, Labels: u.Labels, Unmet: u.Unmet})
	}
	return out
}

// pageSize checks a request's page size: 0 means job.DefaultPageSize.
func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalid(fmt.Sprintf("page_size %d is negative; send 0 (for %d) up to %d", n, job.DefaultPageSize, job.MaxPageSize))
	case n > job.MaxPageSize:
		return 0, invalid(fmt.Sprintf("page_size %d is above the limit; send at most %d", n, job.MaxPageSize))
	case n == 0:
		return job.DefaultPageSize, nil
	}
	return int(n), nil
}

// timeRange checks a request's [since, until).
func timeRange(sinceField string, since, until time.Time) error {
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		return invalid(fmt.Sprintf("the time range is empty: %s %v is not before its end %v; widen it", sinceField, since.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano)))
	}
	return nil
}

// pageErr converts a page lookup's error: with a page token, an invalid
// query can only be the token (the rest was checked before), which is
// forged, damaged, made by another query or expired.
func pageErr(err error, token string) error {
	if token != "" && errors.Is(err, store.ErrInvalid) {
		return invalid(fmt.Sprintf("page_token is not one this server can continue from (%v); start again without page_token, keeping the same filter", err))
	}
	return toConnect(err)
}

// instanceQuery turns a filter into a query's options and the labels to
// match on the server.
func instanceQuery(f *pb.InstanceFilter) ([]job.QueryOption, []string, error) {
	var opts []job.QueryOption
	if f.GetKind() != "" {
		opts = append(opts, job.WithQueryKind(f.GetKind()))
	}
	if f.GetQueue() != "" {
		opts = append(opts, job.WithQueryQueue(f.GetQueue()))
	}
	states, err := statesFromProto(f.GetStates())
	if err != nil {
		return nil, nil, toConnect(fmt.Errorf("filter.states: %w", err))
	}
	if len(states) > 0 {
		opts = append(opts, job.WithQueryState(states...))
	}
	since, err := fromTS("filter.created_after", f.GetCreatedAfter())
	if err != nil {
		return nil, nil, toConnect(err)
	}
	until, err := fromTS("filter.created_before", f.GetCreatedBefore())
	if err != nil {
		return nil, nil, toConnect(err)
	}
	if err := timeRange("filter.created_after", since, until); err != nil {
		return nil, nil, err
	}
	if !since.IsZero() {
		opts = append(opts, job.WithQuerySince(since))
	}
	if !until.IsZero() {
		opts = append(opts, job.WithQueryUntil(until))
	}
	if p := f.GetParentId(); p != "" {
		opts = append(opts, job.WithQueryParent(p))
	}
	labels := f.GetLabels()
	if err := store.ValidateLabelRequirements(labels); err != nil {
		return nil, nil, toConnect(fmt.Errorf("filter.labels: %w", err))
	}
	return opts, store.NormLabels(labels), nil
}

// hasLabels reports whether an instance requires every one of labels.
func hasLabels(in *pb.Instance, labels []string) bool {
	for _, l := range labels {
		if !slices.Contains(in.GetLabels(), l) {
			return false
		}
	}
	return true
}

// ListInstances implements JobService.ListInstances. The store selects by
// kind, queue, states and creation time; the labels of the filter are
// matched here, on each page the store returns, so a page may hold fewer
// instances than page_size (even none) while next_page_token is set: keep
// paging until it is empty. With filter.text, the engine searches what the
// rest of the filter selects (job.Manager.SearchInstances), reading at most
// scan_limit instances a call.
func (h jobService) ListInstances(ctx context.Context, req *connect.Request[pb.ListInstancesRequest]) (*connect.Response[pb.ListInstancesResponse], error) {
	size, err := pageSize(req.Msg.GetPageSize())
	if err != nil {
		return nil, err
	}
	opts, labels, err := instanceQuery(req.Msg.GetFilter())
	if err != nil {
		return nil, err
	}
	opts = append(opts, job.WithQueryLimit(size), job.WithQueryCursor(req.Msg.GetPageToken()))
	var page *job.Page[*job.InstanceInfo]
	var scanned int
	if text := req.Msg.GetFilter().GetText(); text != "" {
		page, scanned, err = searchInstances(ctx, job.NewQuery(opts...), text, labels, req.Msg.GetScanLimit())
	} else {
		page, err = managerOf(ctx).ListInstances(ctx, job.NewQuery(opts...))
		if page != nil {
			scanned = len(page.Items)
		}
	}
	if err != nil {
		return nil, pageErr(err, req.Msg.GetPageToken())
	}
	if err := managerOf(ctx).ResolveDependsOn(ctx, page.Items...); err != nil {
		return nil, toConnect(err)
	}
	out := &pb.ListInstancesResponse{NextPageToken: page.Next, Instances: make([]*pb.Instance, 0, len(page.Items)), Scanned: int64(scanned)}
	for _, ji := range page.Items {
		if in := instanceToProto(ji); hasLabels(in, labels) {
			out.Instances = append(out.Instances, in)
		}
	}
	if err := fillProgress(ctx, managerOf(ctx), out.Instances...); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(out), nil
}

// recordQuery builds the query of ListHistory and ListLogs.
func recordQuery(id, kind string, since, until *timestamppb.Timestamp, size int32, token string) ([]job.QueryOption, error) {
	n, err := pageSize(size)
	if err != nil {
		return nil, err
	}
	s, err := fromTS("since", since)
	if err != nil {
		return nil, toConnect(err)
	}
	u, err := fromTS("until", until)
	if err != nil {
		return nil, toConnect(err)
	}
	if err := timeRange("since", s, u); err != nil {
		return nil, err
	}
	opts := []job.QueryOption{job.WithQueryLimit(n), job.WithQueryCursor(token)}
	if id != "" {
		opts = append(opts, job.WithQueryInstanceID(id))
	}
	if kind != "" {
		opts = append(opts, job.WithQueryKind(kind))
	}
	if !s.IsZero() {
		opts = append(opts, job.WithQuerySince(s))
	}
	if !u.IsZero() {
		opts = append(opts, job.WithQueryUntil(u))
	}
	return opts, nil
}

// ListHistory implements JobService.ListHistory.
func (h jobService) ListHistory(ctx context.Context, req *connect.Request[pb.ListHistoryRequest]) (*connect.Response[pb.ListHistoryResponse], error) {
	r := req.Msg
	opts, err := recordQuery(r.GetInstanceId(), r.GetKind(), r.GetSince(), r.GetUntil(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	states, err := statesFromProto(r.GetStates())
	if err != nil {
		return nil, toConnect(fmt.Errorf("states: %w", err))
	}
	if len(states) > 0 {
		opts = append(opts, job.WithQueryState(states...))
	}
	page, err := managerOf(ctx).ListHistory(ctx, job.NewQuery(opts...))
	if err != nil {
		return nil, pageErr(err, r.GetPageToken())
	}
	out := &pb.ListHistoryResponse{NextPageToken: page.Next, Changes: make([]*pb.StateChange, len(page.Items))}
	for i, rec := range page.Items {
		out.Changes[i] = historyToProto(rec)
	}
	return connect.NewResponse(out), nil
}

// ListLogs implements JobService.ListLogs.
func (h jobService) ListLogs(ctx context.Context, req *connect.Request[pb.ListLogsRequest]) (*connect.Response[pb.ListLogsResponse], error) {
	r := req.Msg
	opts, err := recordQuery(r.GetInstanceId(), r.GetKind(), r.GetSince(), r.GetUntil(), r.GetPageSize(), r.GetPageToken())
	if err != nil {
		return nil, err
	}
	levels, err := levelsFromProto(r.GetLevels())
	if err != nil {
		return nil, toConnect(fmt.Errorf("levels: %w", err))
	}
	if len(levels) > 0 {
		opts = append(opts, job.WithQueryLevel(levels...))
	}
	page, err := managerOf(ctx).ListLogs(ctx, job.NewQuery(opts...))
	if err != nil {
		return nil, pageErr(err, r.GetPageToken())
	}
	out := &pb.ListLogsResponse{NextPageToken: page.Next, Records: make([]*pb.LogRecord, len(page.Items))}
	for i, rec := range page.Items {
		out.Records[i] = logToProto(rec)
	}
	return connect.NewResponse(out), nil
}

// CancelInstance implements JobService.CancelInstance.
func (h jobService) CancelInstance(ctx context.Context, req *connect.Request[pb.CancelInstanceRequest]) (*connect.Response[pb.CancelInstanceResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id is required; send the ID of the instance to cancel")
	}
	ji, err := managerOf(ctx).CancelInstance(ctx, req.Msg.GetId())
	if err == nil {
		err = managerOf(ctx).ResolveDependsOn(ctx, ji)
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CancelInstanceResponse{Instance: instanceToProto(ji)}), nil
}

// retryOptions are the AdminOptions of a retry request.
func retryOptions(reset bool, runAt *timestamppb.Timestamp) ([]job.AdminOption, error) {
	var opts []job.AdminOption
	if reset {
		opts = append(opts, job.WithResetAttempts())
	}
	at, err := fromTS("run_at", runAt)
	if err != nil {
		return nil, toConnect(err)
	}
	if !at.IsZero() {
		opts = append(opts, job.WithRetryAt(at))
	}
	return opts, nil
}

// RetryInstance implements JobService.RetryInstance.
func (h jobService) RetryInstance(ctx context.Context, req *connect.Request[pb.RetryInstanceRequest]) (*connect.Response[pb.RetryInstanceResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id is required; send the ID of the instance to retry")
	}
	opts, err := retryOptions(req.Msg.GetResetAttempts(), req.Msg.GetRunAt())
	if err != nil {
		return nil, err
	}
	ji, err := managerOf(ctx).RetryInstance(ctx, req.Msg.GetId(), opts...)
	if err == nil {
		err = managerOf(ctx).ResolveDependsOn(ctx, ji)
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RetryInstanceResponse{Instance: instanceToProto(ji)}), nil
}

// DeleteInstance implements JobService.DeleteInstance.
func (h jobService) DeleteInstance(ctx context.Context, req *connect.Request[pb.DeleteInstanceRequest]) (*connect.Response[pb.DeleteInstanceResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id is required; send the ID of the instance to delete")
	}
	if err := managerOf(ctx).DeleteInstance(ctx, req.Msg.GetId()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.DeleteInstanceResponse{}), nil
}

// bulkQuery builds the query and options of a bulk operation. Labels
// cannot narrow one (the store does not select by them, and a bulk
// operation acts in the store).
func bulkQuery(f *pb.InstanceFilter, all bool) (*job.Query, []job.AdminOption, error) {
	opts, labels, err := instanceQuery(f)
	if err != nil {
		return nil, nil, err
	}
	if len(labels) > 0 {
		return nil, nil, invalid("filter.labels cannot narrow a bulk operation; narrow it by kind, queue, states or time, or list the instances by labels and act on each ID")
	}
	if f.GetText() != "" {
		return nil, nil, invalid("filter.text cannot narrow a bulk operation (the store cannot select by it); narrow it by kind, queue, states or time, or list the instances by text and act on each ID")
	}
	var admin []job.AdminOption
	if all {
		admin = append(admin, job.WithAllInstances())
	}
	return job.NewQuery(opts...), admin, nil
}

// CancelInstances implements JobService.CancelInstances.
func (h jobService) CancelInstances(ctx context.Context, req *connect.Request[pb.CancelInstancesRequest]) (*connect.Response[pb.CancelInstancesResponse], error) {
	q, opts, err := bulkQuery(req.Msg.GetFilter(), req.Msg.GetAll())
	if err != nil {
		return nil, err
	}
	res, err := managerOf(ctx).Admin().CancelInstances(ctx, q, opts...)
	if err != nil {
		return nil, bulkErr(err)
	}
	return connect.NewResponse(&pb.CancelInstancesResponse{Result: bulkToProto(res)}), nil
}

// RetryInstances implements JobService.RetryInstances.
func (h jobService) RetryInstances(ctx context.Context, req *connect.Request[pb.RetryInstancesRequest]) (*connect.Response[pb.RetryInstancesResponse], error) {
	q, opts, err := bulkQuery(req.Msg.GetFilter(), req.Msg.GetAll())
	if err != nil {
		return nil, err
	}
	more, err := retryOptions(req.Msg.GetResetAttempts(), req.Msg.GetRunAt())
	if err != nil {
		return nil, err
	}
	res, err := managerOf(ctx).Admin().RetryInstances(ctx, q, append(opts, more...)...)
	if err != nil {
		return nil, bulkErr(err)
	}
	return connect.NewResponse(&pb.RetryInstancesResponse{Result: bulkToProto(res)}), nil
}

// DeleteInstances implements JobService.DeleteInstances.
func (h jobService) DeleteInstances(ctx context.Context, req *connect.Request[pb.DeleteInstancesRequest]) (*connect.Response[pb.DeleteInstancesResponse], error) {
	q, opts, err := bulkQuery(req.Msg.GetFilter(), req.Msg.GetAll())
	if err != nil {
		return nil, err
	}
	res, err := managerOf(ctx).Admin().DeleteInstances(ctx, q, opts...)
	if err != nil {
		return nil, bulkErr(err)
	}
	return connect.NewResponse(&pb.DeleteInstancesResponse{Result: bulkToProto(res)}), nil
}

// bulkErr converts a bulk operation's error; the engine's message about an
// empty filter names WithAllInstances, which is the request's "all".
func bulkErr(err error) error {
	if errors.Is(err, job.ErrInvalidOption) && strings.Contains(err.Error(), "WithAllInstances") {
		return invalid(err.Error() + " (over the API: set all=true to act on every instance)")
	}
	return toConnect(err)
}
