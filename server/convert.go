package server

// Conversions between the engine's types (package job and package store)
// and the jobkit.v1 messages, in both directions. Every field a message
// has is filled from the engine's value; a request field that cannot be
// converted is an error wrapping store.ErrInvalid that names the field.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// ts converts a time; the zero time is an unset field.
func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// fromTS converts a request's timestamp; unset is the zero time.
func fromTS(field string, t *timestamppb.Timestamp) (time.Time, error) {
	if t == nil {
		return time.Time{}, nil
	}
	if err := t.CheckValid(); err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %v; send an RFC 3339 time between years 1 and 9999", store.ErrInvalid, field, err)
	}
	return t.AsTime(), nil
}

// dur converts a duration; 0 is an unset field.
func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// fromDur converts a request's duration; unset is 0. A negative duration is
// an error: no field of the API takes one.
func fromDur(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", store.ErrInvalid, field, err)
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, fmt.Errorf("%w: %s is negative (%v); send 0 or more", store.ErrInvalid, field, v)
	}
	if v == math.MaxInt64 {
		return 0, fmt.Errorf("%w: %s is too long; send at most %v", store.ErrInvalid, field, time.Duration(math.MaxInt64-1))
	}
	return v, nil
}

// stateToProto converts an engine state; the numbers are the same.
func stateToProto(s store.State) pb.State {
	if !s.Valid() {
		return pb.State_STATE_UNSPECIFIED
	}
	return pb.State(s)
}

// stateFromProto converts a requested state.
func stateFromProto(s pb.State) (store.State, error) {
	st := store.State(s)
	if s <= 0 || s > pb.State(store.TimedOut) || !st.Valid() {
		return 0, fmt.Errorf("%w: state %v; want one of STATE_SCHEDULED, STATE_PROCESSING, STATE_COMPLETED, STATE_TERMINATED, STATE_CANCELED, STATE_TIMED_OUT", store.ErrInvalid, s)
	}
	return st, nil
}

func statesFromProto(ss []pb.State) ([]store.State, error) {
	out := make([]store.State, 0, len(ss))
	for _, s := range ss {
		st, err := stateFromProto(s)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// levelToProto converts a log level; the numbers are the same.
func levelToProto(l store.LogLevel) pb.LogLevel {
	if l < store.LevelDebug || l > store.LevelError {
		return pb.LogLevel_LOG_LEVEL_UNSPECIFIED
	}
	return pb.LogLevel(l)
}

func levelsFromProto(ls []pb.LogLevel) ([]store.LogLevel, error) {
	out := make([]store.LogLevel, 0, len(ls))
	for _, l := range ls {
		if l < pb.LogLevel_LOG_LEVEL_DEBUG || l > pb.LogLevel_LOG_LEVEL_ERROR {
			return nil, fmt.Errorf("%w: log level %v; want LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN or LOG_LEVEL_ERROR", store.ErrInvalid, l)
		}
		out = append(out, store.LogLevel(l))
	}
	return out, nil
}

// instanceToProto converts an instance the engine returned: every stored
// field, as recordToProto converts a record.
func instanceToProto(ji *job.InstanceInfo) *pb.Instance {
	if ji == nil {
		return nil
	}
	p := recordToProto(&store.Instance{
		ID: ji.ID, Kind: ji.Kind, Queue: ji.Queue, State: ji.State, Args: ji.Args, Priority: int(ji.Priority),
		RunAt: ji.RunAt, Attempt: ji.Attempt, MaxRetries: ji.MaxRetries, Timeout: ji.Timeout,
		UniqueKey: ji.UniqueKey, UniqueUntil: ji.UniqueUntil, LeaseOwner: ji.LeaseOwner, LeaseUntil: ji.LeaseUntil,
		CancelRequested: ji.CancelRequested, Seq: ji.Seq, CreatedAt: ji.CreatedAt, UpdatedAt: ji.UpdatedAt,
		FinishedAt: ji.FinishedAt, Result: ji.Result, Error: ji.Error, Labels: ji.Labels, Metadata: ji.Metadata,
		Parent: ji.Parent, ShardIndex: ji.ShardIndex, ShardCount: ji.ShardCount,
		Task: infoTask(ji),
	})
	p.UniqueKey = ji.UniqueKey // as the user gave it already
	return p
}

// userKeyPrefix is what the engine puts before a unique key a user gave
// (job's userKeyPrefix); the API shows the key as the user gave it.
const userKeyPrefix = "u:"

// recordToProto converts a stored instance record.
func recordToProto(r *store.Instance) *pb.Instance {
	key := r.UniqueKey
	if len(key) > len(userKeyPrefix) && key[:len(userKeyPrefix)] == userKeyPrefix {
		key = key[len(userKeyPrefix):]
	}
	return &pb.Instance{
		Id:              r.ID,
		Kind:            r.Kind,
		Queue:           r.Queue,
		State:           stateToProto(r.State),
		ArgsJson:        string(r.Args),
		Priority:        clamp32(r.Priority),
		RunAt:           ts(r.RunAt),
		Attempt:         clamp32(r.Attempt),
		MaxRetries:      clamp32(r.MaxRetries),
		Timeout:         dur(r.Timeout),
		UniqueKey:       key,
		UniqueUntil:     ts(r.UniqueUntil),
		LeaseOwner:      r.LeaseOwner,
		LeaseUntil:      ts(r.LeaseUntil),
		CancelRequested: r.CancelRequested,
		Seq:             r.Seq,
		CreatedAt:       ts(r.CreatedAt),
		UpdatedAt:       ts(r.UpdatedAt),
		FinishedAt:      ts(r.FinishedAt),
		ResultJson:      string(r.Result),
		Error:           r.Error,
		Labels:          r.Labels,
		Metadata:        recordMetadata(r),
		ParentId:        r.Parent,
		ShardIndex:      clamp32(r.ShardIndex),
		ShardCount:      clamp32(r.ShardCount),
		WorkflowId:      r.Task.GetWorkflow(),
		Task:            r.Task.GetName(),
		DependsOn:       r.Task.GetDeps(),
	}
}

// infoTask returns the workflow fields of ji as the record keeps them
// (dependents aside, which InstanceInfo does not carry); nil outside a
// workflow.
func infoTask(ji *job.InstanceInfo) *store.WorkflowTask {
	if ji.Workflow == "" {
		return nil
	}
	return &store.WorkflowTask{Workflow: ji.Workflow, Name: ji.Task, Deps: ji.DependsOn}
}

// recordFromProto converts an Instance message back to a store record (the
// unique key as the user gave it). The API takes no Instance in a request;
// this is the inverse of recordToProto for its tests and for clients that
// keep records.
func recordFromProto(p *pb.Instance) (*store.Instance, error) {
	var err error
	at := func(field string, t *timestamppb.Timestamp) time.Time {
		v, e := fromTS(field, t)
		if err == nil {
			err = e
		}
		return v
	}
	r := &store.Instance{
		ID: p.GetId(), Kind: p.GetKind(), Queue: p.GetQueue(), State: store.State(p.GetState()),
		Args: []byte(p.GetArgsJson()), Priority: int(p.GetPriority()), Attempt: int(p.GetAttempt()),
		MaxRetries: int(p.GetMaxRetries()), UniqueKey: p.GetUniqueKey(), LeaseOwner: p.GetLeaseOwner(),
		CancelRequested: p.GetCancelRequested(), Seq: p.GetSeq(), Result: []byte(p.GetResultJson()),
		Error: p.GetError(), Labels: p.GetLabels(),
		Parent: p.GetParentId(), ShardIndex: int(p.GetShardIndex()), ShardCount: int(p.GetShardCount()),
		Task:  protoTask(p),
		RunAt: at("run_at", p.GetRunAt()), UniqueUntil: at("unique_until", p.GetUniqueUntil()),
		LeaseUntil: at("lease_until", p.GetLeaseUntil()), CreatedAt: at("created_at", p.GetCreatedAt()),
		UpdatedAt: at("updated_at", p.GetUpdatedAt()), FinishedAt: at("finished_at", p.GetFinishedAt()),
	}
	if err != nil {
		return nil, err
	}
	if r.Timeout, err = fromDur("timeout", p.GetTimeout()); err != nil {
		return nil, err
	}
	if len(r.Args) == 0 {
		r.Args = nil
	}
	if len(r.Result) == 0 {
		r.Result = nil
	}
	setRecordMetadata(r, p.GetMetadata())
	return r, nil
}

// clamp32 converts an int the engine keeps to an int32 field, saturating.
func clamp32(n int) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}

// historyToProto converts a state record.
func historyToProto(h *store.HistoryRecord) *pb.StateChange {
	return &pb.StateChange{
		InstanceId: h.InstanceID,
		Kind:       h.Kind,
		State:      stateToProto(h.State),
		Attempt:    clamp32(h.Attempt),
		Time:       ts(h.Time),
		Node:       h.Node,
		Error:      h.Error,
		ResultJson: string(h.Result),
		Seq:        h.Seq,
	}
}

// logToProto converts a log record.
func logToProto(l *store.LogRecord) *pb.LogRecord {
	return &pb.LogRecord{
		InstanceId: l.InstanceID,
		Kind:       l.Kind,
		Attempt:    clamp32(l.Attempt),
		Level:      levelToProto(l.Level),
		Time:       ts(l.Time),
		Node:       l.Node,
		Message:    l.Message,
		Seq:        l.Seq,
	}
}

// eventToProto converts a change-feed event.
func eventToProto(e *store.Event) *pb.Event {
	return &pb.Event{
		Cursor:     e.Cursor,
		InstanceId: e.InstanceID,
		Kind:       e.Kind,
		Queue:      e.Queue,
		State:      stateToProto(e.State),
		Attempt:    clamp32(e.Attempt),
		Time:       ts(e.Time),
		Node:       e.Node,
		Error:      e.Error,
		Seq:        e.Seq,
	}
}

// The enum names of a definition's backoff and unique policy.
var (
	backoffKinds = map[store.BackoffKind]pb.BackoffKind{
		store.BackoffDefault:     pb.BackoffKind_BACKOFF_KIND_UNSPECIFIED,
		store.BackoffConstant:    pb.BackoffKind_BACKOFF_KIND_CONSTANT,
		store.BackoffExponential: pb.BackoffKind_BACKOFF_KIND_EXPONENTIAL,
	}
	uniqueBys = map[store.UniqueBy]pb.UniqueBy{
		store.UniqueByArgs: pb.UniqueBy_UNIQUE_BY_ARGS,
		store.UniqueByKey:  pb.UniqueBy_UNIQUE_BY_KEY,
	}
	overlaps = map[store.OverlapPolicy]pb.OverlapPolicy{
		"":                   pb.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED,
		store.OverlapAllow:   pb.OverlapPolicy_OVERLAP_POLICY_ALLOW,
		store.OverlapForbid:  pb.OverlapPolicy_OVERLAP_POLICY_FORBID,
		store.OverlapReplace: pb.OverlapPolicy_OVERLAP_POLICY_REPLACE,
	}
	misseds = map[store.MissedTickPolicy]pb.MissedTickPolicy{
		"":                      pb.MissedTickPolicy_MISSED_TICK_POLICY_UNSPECIFIED,
		store.MissedSkip:        pb.MissedTickPolicy_MISSED_TICK_POLICY_SKIP,
		store.MissedCatchUpOnce: pb.MissedTickPolicy_MISSED_TICK_POLICY_CATCH_UP_ONCE,
	}
)

// reverse returns the inverse of an enum map.
func reverse[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	backoffKindsBack = reverse(backoffKinds)
	uniqueBysBack    = reverse(uniqueBys)
	overlapsBack     = reverse(overlaps)
	missedsBack      = reverse(misseds)
)

// definitionToProto converts a stored definition.
func definitionToProto(d *store.Definition) *pb.Definition {
	if d == nil {
		return nil
	}
	out := &pb.Definition{
		Kind:        d.Kind,
		Queue:       d.Queue,
		Priority:    clamp32(d.Priority),
		MaxRetries:  clamp32(d.MaxRetries),
		Timeout:     dur(d.Timeout),
		Labels:      d.Labels,
		Description: d.Description,
		Version:     d.Version,
		CreatedAt:   ts(d.CreatedAt),
		UpdatedAt:   ts(d.UpdatedAt),
		Backoff: &pb.Backoff{
			Kind:   backoffKinds[d.Backoff.Kind],
			Base:   dur(d.Backoff.Base),
			Limit:  dur(d.Backoff.Limit),
			Jitter: d.Backoff.Jitter,
		},
	}
	if d.Unique != nil {
		out.Unique = &pb.UniquePolicy{By: uniqueBys[d.Unique.By], Ttl: dur(d.Unique.TTL)}
	}
	out.Executor = executorToProto(d.Executor)
	out.ConvertArguments = d.ConvertArguments
	return out
}

// definitionFromProto converts a requested definition; version and times
// are the store's and are not read.
func definitionFromProto(p *pb.Definition) (store.Definition, error) {
	if p == nil {
		return store.Definition{}, fmt.Errorf("%w: no definition in the request; send one with at least kind and queue", store.ErrInvalid)
	}
	d := store.Definition{
		Kind:        p.GetKind(),
		Queue:       p.GetQueue(),
		Priority:    int(p.GetPriority()),
		MaxRetries:  int(p.GetMaxRetries()),
		Labels:      p.GetLabels(),
		Description: p.GetDescription(),
		Executor:    executorFromProto(p.GetExecutor()),

		ConvertArguments: p.GetConvertArguments(),
	}
	var err error
	if d.Timeout, err = fromDur("definition.timeout", p.GetTimeout()); err != nil {
		return d, err
	}
	if b := p.GetBackoff(); b != nil {
		kind, ok := backoffKindsBack[b.GetKind()]
		if !ok {
			return d, fmt.Errorf("%w: definition.backoff.kind %v; want BACKOFF_KIND_CONSTANT, BACKOFF_KIND_EXPONENTIAL or unset", store.ErrInvalid, b.GetKind())
		}
		d.Backoff.Kind, d.Backoff.Jitter = kind, b.GetJitter()
		if d.Backoff.Base, err = fromDur("definition.backoff.base", b.GetBase()); err != nil {
			return d, err
		}
		if d.Backoff.Limit, err = fromDur("definition.backoff.limit", b.GetLimit()); err != nil {
			return d, err
		}
	}
	if u := p.GetUnique(); u != nil {
		by, ok := uniqueBysBack[u.GetBy()]
		if !ok {
			return d, fmt.Errorf("%w: definition.unique.by %v; want UNIQUE_BY_ARGS or UNIQUE_BY_KEY (or leave unique unset)", store.ErrInvalid, u.GetBy())
		}
		d.Unique = &store.UniquePolicy{By: by}
		if d.Unique.TTL, err = fromDur("definition.unique.ttl", u.GetTtl()); err != nil {
			return d, err
		}
	}
	return d, nil
}

// triggerToProto converts a stored trigger with the next times it fires.
func triggerToProto(t *store.Trigger, next []time.Time) *pb.Trigger {
	if t == nil {
		return nil
	}
	out := &pb.Trigger{
		Name:             t.Name,
		Kind:             t.Kind,
		ArgsJson:         string(t.Args),
		Cron:             t.Cron,
		TimeZone:         t.TimeZone,
		Interval:         dur(t.Interval),
		Paused:           t.Paused,
		Overlap:          overlaps[t.Overlap],
		Missed:           misseds[t.Missed],
		CatchUpWithin:    dur(t.CatchUpWithin),
		LastTick:         ts(t.LastTick),
		LastInstanceId:   t.LastInstanceID,
		Skipped:          t.Skipped,
		LastSkipped:      ts(t.LastSkipped),
		Version:          t.Version,
		CreatedAt:        ts(t.CreatedAt),
		UpdatedAt:        ts(t.UpdatedAt),
		Calendar:         t.Calendar,
		CalendarPolicy:   calendarPolicies[t.CalendarPolicy],
		WorkflowTemplate: t.Workflow,
		ParamsJson:       string(t.Params),
	}
	for _, n := range next {
		out.NextFireTimes = append(out.NextFireTimes, timestamppb.New(n))
	}
	return out
}

// triggerFromProto converts a requested trigger: what a user sets; the
// scheduler's fields, the version and the times are not read.
func triggerFromProto(p *pb.Trigger) (*store.Trigger, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no trigger in the request; send one with name, kind and cron or interval", store.ErrInvalid)
	}
	t := &store.Trigger{
		Name:     p.GetName(),
		Kind:     p.GetKind(),
		Cron:     p.GetCron(),
		TimeZone: p.GetTimeZone(),
		Paused:   p.GetPaused(),
	}
	if a := bytes.TrimSpace([]byte(p.GetArgsJson())); len(a) > 0 {
		if _, err := parseArgs(p.GetArgsJson()); err != nil {
			return nil, fmt.Errorf("trigger.args_json: %w", err)
		}
		t.Args = a
	}
	t.Workflow = p.GetWorkflowTemplate()
	if a := bytes.TrimSpace([]byte(p.GetParamsJson())); len(a) > 0 {
		t.Params = a
	}
	var ok bool
	if t.Overlap, ok = overlapsBack[p.GetOverlap()]; !ok {
		return nil, fmt.Errorf("%w: trigger.overlap %v; want OVERLAP_POLICY_ALLOW, OVERLAP_POLICY_FORBID or OVERLAP_POLICY_REPLACE", store.ErrInvalid, p.GetOverlap())
	}
	if t.Missed, ok = missedsBack[p.GetMissed()]; !ok {
		return nil, fmt.Errorf("%w: trigger.missed %v; want MISSED_TICK_POLICY_SKIP or MISSED_TICK_POLICY_CATCH_UP_ONCE", store.ErrInvalid, p.GetMissed())
	}
	t.Calendar = p.GetCalendar()
	if t.CalendarPolicy, ok = calendarPoliciesBack[p.GetCalendarPolicy()]; !ok {
		return nil, fmt.Errorf("%w: trigger.calendar_policy %v; want CALENDAR_POLICY_WORKDAYS, CALENDAR_POLICY_SKIP_DATES or CALENDAR_POLICY_NEXT_WORKDAY", store.ErrInvalid, p.GetCalendarPolicy())
	}
	var err error
	if t.Interval, err = fromDur("trigger.interval", p.GetInterval()); err != nil {
		return nil, err
	}
	if t.CatchUpWithin, err = fromDur("trigger.catch_up_within", p.GetCatchUpWithin()); err != nil {
		return nil, err
	}
	return t, nil
}

// parseArgs reads a request's args_json: a JSON array of any values, or
// empty for none. Each element is kept as its JSON text, which
// job.WithArguments encodes unchanged and the engine checks against the
// executor's parameters when the kind is registered.
func parseArgs(argsJSON string) ([]any, error) {
	a := bytes.TrimSpace([]byte(argsJSON))
	if len(a) == 0 {
		return nil, nil
	}
	if a[0] != '[' {
		return nil, fmt.Errorf("%w: args_json %s is not a JSON array; send the arguments as one, e.g. [1, \"x\"] (or [] for none)", job.ErrInvalidArguments, snippet(a))
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(a, &raw); err != nil {
		return nil, fmt.Errorf("%w: args_json %s is not valid JSON (%v); send a JSON array, e.g. [1, \"x\"]", job.ErrInvalidArguments, snippet(a), err)
	}
	out := make([]any, len(raw))
	for i, r := range raw {
		out[i] = r
	}
	return out, nil
}

// snippet returns b for an error message, cut to 64 bytes.
func snippet(b []byte) string {
	if len(b) > 64 {
		return string(b[:61]) + "..."
	}
	return string(b)
}

// countsToProto converts per-state counts.
func countsToProto(s *[store.TimedOut + 1]int64) *pb.StateCounts {
	return &pb.StateCounts{
		Created:    s[store.Created],
		Scheduled:  s[store.Scheduled],
		Processing: s[store.Processing],
		Completed:  s[store.Completed],
		Terminated: s[store.Terminated],
		Canceled:   s[store.Canceled],
		TimedOut:   s[store.TimedOut],
	}
}

// lagFields returns the oldest_ready_at and lag fields of a queue or kind:
// oldest unset and lag zero when none is ready.
func lagFields(l store.Lag) (*timestamppb.Timestamp, *durationpb.Duration) {
	return ts(l.OldestReady), durationpb.New(l.Age)
}

// nodeStatuses maps the registry's node statuses.
var nodeStatuses = map[store.NodeStatus]pb.NodeStatus{
	store.NodeLive:  pb.NodeStatus_NODE_STATUS_LIVE,
	store.NodeStale: pb.NodeStatus_NODE_STATUS_STALE,
	store.NodeDead:  pb.NodeStatus_NODE_STATUS_DEAD,
	store.NodeLeft:  pb.NodeStatus_NODE_STATUS_LEFT,
}

// nodeToProto converts a node's registry record.
func nodeToProto(n *store.NodeInfo) *pb.Node {
	return &pb.Node{
		Id:        n.ID,
		Host:      n.Host,
		Labels:    n.Labels,
		Kinds:     n.Kinds,
		Queues:    n.Queues,
		Workers:   clamp32(n.Workers),
		Busy:      clamp32(n.Busy),
		Version:   n.Version,
		StartedAt: ts(n.Started),
		LastSeen:  ts(n.LastSeen),
		Skew:      durationpb.New(n.Skew),
		Status:    nodeStatuses[n.Status],
		GoneAt:    ts(n.GoneAt),

		ExecutorTypes: n.ExecutorTypes,
	}
}

// bulkToProto converts what a bulk operation did.
func bulkToProto(r job.BulkResult) *pb.BulkResult {
	return &pb.BulkResult{Matched: int64(r.Matched), Applied: int64(r.Applied), Skipped: int64(r.Skipped)}
}

// fillProgress sets the progress fields of ins from the store's progress
// records (kept beside the instances, see store.Progress).
func fillProgress(ctx context.Context, m *job.Manager, ins ...*pb.Instance) error {
	ids := make([]string, 0, len(ins))
	for _, in := range ins {
		if in != nil {
			ids = append(ids, in.GetId())
		}
	}
	if len(ids) == 0 {
		return nil
	}
	got, err := m.GetProgress(ctx, ids...)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if p, ok := got[in.GetId()]; ok && in != nil {
			in.Progress, in.ProgressMessage, in.ProgressAt = p.Fraction, p.Message, ts(p.Time)
		}
	}
	return nil
}

// protoTask returns the workflow fields of p (its dependents are not in
// the message); nil outside a workflow.
func protoTask(p *pb.Instance) *store.WorkflowTask {
	if p.GetWorkflowId() == "" {
		return nil
	}
	return &store.WorkflowTask{Workflow: p.GetWorkflowId(), Name: p.GetTask(), Deps: p.GetDependsOn()}
}
