package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Instance is one scheduled run of a job as the server returned it: a
// snapshot, data only (it cannot log), with an accessor for each field of
// job.InstanceInfo. Safe for concurrent use.
type Instance struct {
	pb      *jobkitv1.Instance
	waiting *jobkitv1.WaitExplanation // set by GetInstance while Scheduled
}

func newInstance(pb *jobkitv1.Instance) *Instance {
	if pb == nil {
		pb = &jobkitv1.Instance{}
	}
	return &Instance{pb: pb}
}

// Waiting says why the instance is not running yet, as the server's
// Manager.ExplainWaiting found when GetInstance read it: nil when it
// was not Scheduled, or when the instance came from another call.
func (i *Instance) Waiting() *job.WaitExplanation {
	if i.waiting == nil {
		return nil
	}
	w := i.waiting
	ex := &job.WaitExplanation{ID: i.pb.GetId(), Reason: job.WaitReason(w.GetReason()), Message: w.GetMessage(),
		Requires: i.Labels(), Matching: append([]string(nil), w.GetMatchingNodes()...)}
	if i.pb.GetRunAt() != nil {
		ex.RunAt = i.pb.GetRunAt().AsTime()
	}
	for _, u := range w.GetUnmatchedNodes() {
		ex.Unmatched = append(ex.Unmatched, job.NodeMismatch{Node: u.GetNode(),
			Labels: append([]string(nil), u.GetLabels()...), Unmet: append([]string(nil), u.GetUnmet()...)})
	}
	return ex
}

// WaitingProto returns the explanation message the server sent with the
// instance (see Waiting), or nil. Do not change it.
func (i *Instance) WaitingProto() *jobkitv1.WaitExplanation { return i.waiting }

// Proto returns the instance message the server sent. Do not change it.
func (i *Instance) Proto() *jobkitv1.Instance { return i.pb }

// ID is the instance's unique ID (a UUID).
func (i *Instance) ID() string { return i.pb.GetId() }

// Kind is the kind of the job the instance runs.
func (i *Instance) Kind() string { return i.pb.GetKind() }

// Queue is the queue the instance waits in.
func (i *Instance) Queue() string { return i.pb.GetQueue() }

// State is the instance's state when it was read (0 if the server sent
// none).
func (i *Instance) State() job.State { return job.State(i.pb.GetState()) }

// Priority orders claims: higher first.
func (i *Instance) Priority() job.Priority { return job.Priority(i.pb.GetPriority()) }

// Attempt is 0 before the first run and 1 during the first attempt.
func (i *Instance) Attempt() int { return int(i.pb.GetAttempt()) }

// MaxRetries is the retries the instance allows; job.RetryForever is -1.
func (i *Instance) MaxRetries() int { return int(i.pb.GetMaxRetries()) }

// Timeout bounds one attempt; 0 means none.
func (i *Instance) Timeout() time.Duration { return i.pb.GetTimeout().AsDuration() }

// RunAt is when the instance is (or was last) due.
func (i *Instance) RunAt() time.Time { return asTime(i.pb.GetRunAt()) }

// CreatedAt is when the instance was stored.
func (i *Instance) CreatedAt() time.Time { return asTime(i.pb.GetCreatedAt()) }

// UpdatedAt is when the store last wrote the instance's record.
func (i *Instance) UpdatedAt() time.Time { return asTime(i.pb.GetUpdatedAt()) }

// FinishedAt is when the instance reached a final state, or zero.
func (i *Instance) FinishedAt() time.Time { return asTime(i.pb.GetFinishedAt()) }

// UniqueKey is the unique key the instance holds, if any.
func (i *Instance) UniqueKey() string { return i.pb.GetUniqueKey() }

// Shard returns a shard's index and its task's shard count; 0 and the
// count for the task's parent; 0 and 0 for any other instance.
func (i *Instance) Shard() (index, count int) {
	return int(i.pb.GetShardIndex()), int(i.pb.GetShardCount())
}

// Parent is the ID of the sharded task's parent a shard belongs to; ""
// for any other instance.
func (i *Instance) Parent() string { return i.pb.GetParentId() }

// Workflow returns the ID of the workflow a workflow task belongs to, its
// name in it and the IDs of the instances it waits for; "", "" and nil
// for any other instance.
func (i *Instance) Workflow() (id, task string, dependsOn []string) {
	return i.pb.GetWorkflowId(), i.pb.GetTask(), i.pb.GetDependsOn()
}

// Labels are the labels a node must have to run the instance; nil for
// none.
func (i *Instance) Labels() []string {
	if len(i.pb.GetLabels()) == 0 {
		return nil
	}
	return append([]string(nil), i.pb.GetLabels()...)
}

// Metadata returns a copy of the string pairs carried to every attempt.
func (i *Instance) Metadata() map[string]string { return maps.Clone(i.pb.GetMetadata()) }

// CancelRequested reports whether a cancel was asked for while the
// instance ran.
func (i *Instance) CancelRequested() bool { return i.pb.GetCancelRequested() }

// LeaseOwner is the node running the instance, while it is Processing.
func (i *Instance) LeaseOwner() string { return i.pb.GetLeaseOwner() }

// Arguments returns the arguments decoded from JSON into generic values
// (numbers as json.Number); nil for none or when they do not decode.
// ArgumentsInto reads them into typed values.
func (i *Instance) Arguments() []any { return decodeAny(i.pb.GetArgsJson()) }

// ArgumentsInto decodes the arguments into ptrs, one pointer per argument
// in order; a nil entry skips its argument. A count that differs, or a
// value that does not decode, is an error wrapping
// job.ErrInvalidArguments that names the argument.
func (i *Instance) ArgumentsInto(ptrs ...any) error {
	return decodeInto(i.pb.GetArgsJson(), "argument", job.ErrInvalidArguments, ptrs)
}

// Results returns the results of a completed instance, as Arguments
// decodes the arguments.
func (i *Instance) Results() []any { return decodeAny(i.pb.GetResultJson()) }

// ResultsInto decodes the results of a completed instance into ptrs, as
// ArgumentsInto does; errors wrap job.ErrInvalidResults.
func (i *Instance) ResultsInto(ptrs ...any) error {
	if i.State() != job.Completed {
		return fmt.Errorf("%w: instance %s is %s, and only a completed instance has results", job.ErrInvalidResults, i.ID(), i.State())
	}
	return decodeInto(i.pb.GetResultJson(), "result", job.ErrInvalidResults, ptrs)
}

// Error returns the last attempt's error, or nil.
func (i *Instance) Error() error {
	if m := i.pb.GetError(); m != "" {
		return errors.New(m)
	}
	return nil
}

// String returns "kind/id (state)".
func (i *Instance) String() string { return fmt.Sprintf("%s/%s (%s)", i.Kind(), i.ID(), i.State()) }

func decodeAny(s string) []any {
	if s == "" {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var out []any
	if err := d.Decode(&out); err != nil {
		return nil
	}
	return out
}

func decodeInto(s, what string, sentinel error, ptrs []any) error {
	var raw []json.RawMessage
	if s != "" {
		if err := json.Unmarshal([]byte(s), &raw); err != nil {
			return fmt.Errorf("%w: stored %ss are not a JSON array: %w", sentinel, what, err)
		}
	}
	if len(raw) != len(ptrs) {
		return fmt.Errorf("%w: %d %ss stored, %d pointers given", sentinel, len(raw), what, len(ptrs))
	}
	for n, p := range ptrs {
		if p == nil {
			continue
		}
		if err := json.Unmarshal(raw[n], p); err != nil {
			return fmt.Errorf("%w: %s %d (%s): %w", sentinel, what, n, raw[n], err)
		}
	}
	return nil
}
