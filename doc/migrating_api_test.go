// Package doc_test holds the compile-time check of the API claims of
// migrating-from-go-job.md: each jobkit name the guide gives in package
// job (and the store plugins of the core module) is used here with the
// signature the guide states, so a change to one fails to compile and
// the guide is fixed with it. The names of the server, client and
// metrics modules are checked the same way in
// server/migrating_api_test.go.
package doc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// The Manager table.
var (
	_ func(...job.ManagerOption) (*job.Manager, error)                                              = job.NewManager
	_ func(store.Store) job.ManagerOption                                                           = job.WithStore
	_ func(int) job.ManagerOption                                                                   = job.WithWorkers
	_                                                                                               = job.DefaultWorkers
	_ func(*job.Manager, *job.Job) error                                                            = (*job.Manager).RegisterJob
	_ func(*job.Manager, string) error                                                              = (*job.Manager).UnregisterJob
	_ func(*job.Manager) []string                                                                   = (*job.Manager).RegisteredKinds
	_ func(*job.Manager, string) (*job.Job, error)                                                  = (*job.Manager).GetJob
	_ func(*job.Manager, context.Context, string, ...job.ScheduleOption) (*job.InstanceInfo, error) = (*job.Manager).ScheduleJob
	_ func(*job.Manager, context.Context, *job.Query) ([]*job.InstanceInfo, error)                  = (*job.Manager).LookupInstances
	_ func(*job.Manager, context.Context, string) (*job.InstanceInfo, error)                        = (*job.Manager).GetInstance
	_ func(*job.Manager, context.Context, string) (*job.InstanceInfo, error)                        = (*job.Manager).CancelInstance
	_ func(*job.Admin, context.Context, *job.Query, ...job.AdminOption) (job.BulkResult, error)     = (*job.Admin).CancelInstances
	_ func(*job.Manager, context.Context, *job.Query) ([]*job.HistoryRecord, error)                 = (*job.Manager).LookupInstanceHistory
	_ func(*job.Manager, context.Context, *job.Query) ([]*job.LogRecord, error)                     = (*job.Manager).LookupInstanceLogs
	_ func(*job.Admin, context.Context) (job.PruneResult, error)                                    = (*job.Admin).Prune
	_ func(*job.Manager) (size, busy int)                                                           = (*job.Manager).Workers
	_ func(*job.Manager, int) error                                                                 = (*job.Manager).SetWorkers
	_ func(*job.Manager, context.Context) error                                                     = (*job.Manager).Start
	_ func(*job.Manager, context.Context) error                                                     = (*job.Manager).Stop
	_ func(*job.Manager, context.Context) error                                                     = (*job.Manager).Wait
	_ func(*job.Manager) string                                                                     = (*job.Manager).NodeID
	_ func(string) job.ManagerOption                                                                = job.WithNodeID
	_                                                                                               = []any{job.WithQueues, job.WithLease, job.WithPollInterval, job.WithRescueInterval, job.WithClaimBatch,
		job.WithFinishLinger, job.WithFinishInterval, job.WithClock, job.WithLogger, job.WithRetention, job.WithHistoryRetention,
		job.WithLogRetention, job.WithPruneInterval}
)

// The Jobs, executors and processors table, and point 5 and 13.
var (
	_ func(...job.JobOption) (*job.Job, error)                                                                               = job.NewJob
	_ func(*job.Job) string                                                                                                  = (*job.Job).Kind
	_ func(*job.Job) string                                                                                                  = (*job.Job).Queue
	_ func(string) job.JobOption                                                                                             = job.WithKind
	_ func(any) job.JobOption                                                                                                = job.WithExecutor
	_ func(func(job.Instance, []any)) job.JobOption                                                                          = job.WithCompleteProcessor
	_ func(func(job.Instance, error)) job.JobOption                                                                          = job.WithTerminateProcessor
	_ func(func(job.Instance, error) error) job.JobOption                                                                    = job.WithTerminateVerdict
	_ func(func(job.Instance, job.State)) job.JobOption                                                                      = job.WithStateChangeProcessor
	_ func(...any) job.ScheduleOption                                                                                        = job.WithArguments
	_ func() job.JobOption                                                                                                   = job.WithArgumentConversion
	_ func(*job.Job) bool                                                                                                    = (*job.Job).ConvertsArguments
	_ bool                                                                                                                   = job.Definition{}.ConvertArguments
	_ func(*job.Manager, string, func(context.Context, int) (int, error), ...job.JobOption) (*job.TypedJob[int, int], error) = job.Register[int, int]
	_ func(*job.TypedJob[int, int], context.Context, int, ...job.ScheduleOption) (*job.TypedInstance[int, int], error)       = (*job.TypedJob[int, int]).Schedule
)

// Policy, schedule, queries, states, logs and errors.
var (
	_ func(job.Priority) job.PolicyOption                      = job.WithPriority
	_ func(int) job.PolicyOption                               = job.WithMaxRetries
	_ func(time.Duration) job.PolicyOption                     = job.WithTimeout
	_ func(string) job.PolicyOption                            = job.WithQueue
	_                                                          = []job.Priority{job.HighPriority, job.NormalPriority, job.LowPriority}
	_                                                          = job.RetryForever
	_ job.Backoff                                              = func(attempt int) time.Duration { return 0 }
	_ func(job.Backoff) job.JobOption                          = job.WithBackoff
	_ func(time.Duration) job.Backoff                          = job.ConstantBackoff
	_ func(base, limit time.Duration) job.Backoff              = job.ExponentialBackoff
	_ func(error) error                                        = job.Permanent
	_ func(string, time.Duration) job.ScheduleOption           = job.WithUniqueKey
	_ func(time.Time) job.ScheduleOption                       = job.WithScheduleAt
	_ func(time.Duration) job.ScheduleOption                   = job.WithScheduleAfter
	_ func(time.Duration) job.ScheduleOption                   = job.WithJitter
	_ func(string, ...job.ScheduleOption) job.JobOption        = job.WithCronSpec
	_ func(time.Duration, ...job.ScheduleOption) job.JobOption = job.WithInterval
	_ func(...job.QueryOption) *job.Query                      = job.NewQuery
	_ func(*job.InstanceInfo) job.QueryOption                  = job.WithQueryInstance
	_ func(string) job.QueryOption                             = job.WithQueryInstanceID
	_ func(string) job.QueryOption                             = job.WithQueryKind
	_ func(...job.State) job.QueryOption                       = job.WithQueryState
	_ func(...job.LogLevel) job.QueryOption                    = job.WithQueryLevel
	_ func(time.Time) job.QueryOption                          = job.WithQuerySince
	_ func(time.Time) job.QueryOption                          = job.WithQueryUntil
	_ func(string) job.QueryOption                             = job.WithQueryQueue
	_ func(int) job.QueryOption                                = job.WithQueryLimit
	_                                                          = []job.State{job.Created, job.Scheduled, job.Processing, job.Completed, job.Terminated, job.Canceled, job.TimedOut}
	_ func(job.State) bool                                     = job.State.Final
	_ func(job.State) bool                                     = job.State.Valid
	_ func(job.State) string                                   = job.State.String
	_                                                          = store.ParseState
	_                                                          = []job.LogLevel{job.LogInfo, job.LogWarn, job.LogError, job.LogDebug}
	_ func(job.LogLevel) string                                = job.LogLevel.String
	_ *store.HistoryRecord                                     = (*job.HistoryRecord)(nil)
	_ *store.LogRecord                                         = (*job.LogRecord)(nil)
	_ string                                                   = job.Version
	_                                                          = []error{job.ErrUnknownKind, job.ErrDuplicateKind, job.ErrInvalidJob, job.ErrInvalidArguments,
		job.ErrInvalidResults, job.ErrInvalidOption, job.ErrDuplicate, job.ErrNotFound, job.ErrFinished, job.ErrCorrupt,
		job.ErrTooLarge, job.ErrTimeout, job.ErrCanceled, job.ErrPanic, job.ErrShutdown, job.ErrLeaseLost,
		job.ErrNotRunning, job.ErrAlreadyStarted, job.ErrPermanent}
	_ = func() (*memdbstore.Store, error) { return memdbstore.New() } // the guide calls it with no options
)

// The InstanceInfo fields and methods, and the Instance handle's methods,
// that the Instances table names.
func instanceMethods(info *job.InstanceInfo, ji job.Instance) {
	var (
		_ string            = info.ID
		_ string            = info.Kind
		_ job.State         = info.State
		_ int               = info.Attempt
		_ []any             = info.Arguments()
		_ error             = info.ArgumentsInto()
		_ []any             = info.Results()
		_ error             = info.ResultsInto()
		_ string            = info.Error
		_ error             = info.Err()
		_ time.Time         = info.CreatedAt
		_ time.Time         = info.RunAt
		_ time.Time         = info.UpdatedAt
		_ time.Time         = info.FinishedAt
		_ string            = info.UniqueKey
		_ string            = info.Queue
		_ job.Priority      = info.Priority
		_ int               = info.MaxRetries
		_ time.Duration     = info.Timeout
		_ *job.InstanceInfo = ji.Info()
		_ []any             = ji.Arguments()
	)
	ji.Infof("%d", 1)
	ji.Warnf("%d", 1)
	ji.Errorf("%d", 1)
	ji.Debugf("%d", 1)
}

// TestGuideNamesCompile is what makes `go test ./doc` build this file.
func TestGuideNamesCompile(t *testing.T) {
	_ = instanceMethods
	if job.Version == "" {
		t.Error("job.Version is empty; the guide says it names the engine's version")
	}
}
