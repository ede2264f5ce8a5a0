// Package job schedules and runs jobs: arbitrary Go functions registered
// by kind, whose instances wait in a store-backed queue and run on a pool
// of workers, with priorities, retries with backoff, timeouts, unique keys,
// cron and interval schedules, and a history of every state change and
// the logs each instance wrote.
//
// # Jobs and executors
//
// A Job pairs a kind with an executor, a func of any signature. Leading
// parameters of type context.Context and Instance are injected; the others
// are decoded from the instance's arguments, stored as JSON, into the
// declared types. Results may be any number of values; a trailing error is
// the attempt's error:
//
//	sum, err := job.NewJob(
//		job.WithKind("sum"),
//		job.WithExecutor(func(ctx context.Context, a, b int) (int, error) { return a + b, nil }),
//		job.WithMaxRetries(3),
//		job.WithBackoff(job.ExponentialBackoff(time.Second, time.Minute)),
//	)
//
// ScheduleJob checks the arguments against the executor before it stores
// anything, so a wrong count or type is an error at once, not a failed run.
// Read from a lookup, arguments and results are plain JSON values
// (InstanceInfo.Arguments, InstanceInfo.Results); InstanceInfo.ArgumentsInto
// and InstanceInfo.ResultsInto decode them into typed values:
//
//	var sum int
//	err := done.ResultsInto(&sum)
//
// # Instances: data and handle
//
// What ScheduleJob and the lookups (GetInstance, LookupInstances,
// ListInstances, SearchInstances) return is an *InstanceInfo: plain data,
// every stored field of the instance, with no way to write. The Instance
// an executor takes as a leading parameter (and that handlers and
// Middleware.Run receive) is the handle of one attempt: it writes the
// attempt's logs (Infof, ...) and progress (SetProgress), and its Info
// returns the same data:
//
//	job.WithExecutor(func(ji job.Instance, path string) error {
//		ji.Infof("attempt %d copies %s", ji.Info().Attempt, path)
//		return nil
//	})
//
// So nothing read back from the store can write into an instance's logs.
//
// # Typed jobs
//
// For compile-time checks, Register binds an executor that takes one
// argument value and returns one result, and returns a TypedJob whose
// Schedule takes that argument type and whose lookups return it and the
// result typed. It is a layer over the same registry: the any-signature
// path above stays the default, and both schedule the same instances.
//
//	type email struct{ To, Subject string }
//	mailer, err := job.Register(mgr, "email", func(ctx context.Context, e email) (string, error) { ... })
//	ji, err := mailer.Schedule(ctx, email{To: "ada"}, job.WithPriority(job.HighPriority))
//	...
//	done, err := mailer.GetInstance(ctx, ji.ID)
//	id, err := done.Result() // a string
//
// # Options
//
// Options are typed (ManagerOption, JobOption, ScheduleOption,
// QueryOption) and named for what they set, with one name for one meaning:
//
//   - WithPriority, WithMaxRetries, WithTimeout and WithQueue return a
//     PolicyOption, which is both a JobOption and a ScheduleOption: on
//     NewJob it sets the job's default, on ScheduleJob (or a recurring
//     schedule) it overrides that default for the instances scheduled with it.
//   - Options that only make sense for one instance are ScheduleOptions:
//     WithArguments, WithScheduleAt and WithScheduleAfter (when it is due,
//     named as go-job names them), WithJitter and WithUniqueKey.
//   - Options that only make sense for a job are JobOptions: WithKind,
//     WithExecutor, WithBackoff, WithCronSpec, WithInterval and the
//     handlers (With...Processor).
//   - Query options start with WithQuery because they select rather than
//     set: WithQueryKind selects instances of a kind, WithKind names a job.
//
// A job that mails at low priority, and one mail that must go first:
//
//	mail, err := job.NewJob(job.WithKind("mail"), job.WithExecutor(send),
//		job.WithPriority(job.LowPriority)) // the default
//	ji, err := mgr.ScheduleJob(ctx, "mail", job.WithArguments(to),
//		job.WithPriority(job.HighPriority), job.WithScheduleAfter(time.Minute)) // this one only
//
// # Managers and stores
//
// A Manager holds the registry and runs the instances of its queues. Its
// Store (package store) keeps the queue, the history and the logs; the
// default is an in-process store (store/memdbstore) on copy-on-write B-trees. Managers in
// several processes that share a Redis, Valkey or etcd store form a
// cluster: the store is the distributed engine, and each attempt is
// claimed by exactly one manager in one atomic store operation.
//
//	mgr, err := job.NewManager(job.WithWorkers(8))
//	err = mgr.RegisterJob(sum)
//	err = mgr.Start(ctx)
//	ji, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments(1, 2))
//	err = mgr.Stop(ctx) // drains running work until ctx ends
//
// # Delivery
//
// Each attempt is claimed once (exactly-once claim) and runs at least once:
// a claim holds a lease that the manager renews while the attempt runs;
// when a manager dies, its leases expire and the other managers rescue the
// instances (back to Scheduled, the attempt counted, or Terminated when no
// retries are left). A failed attempt with retries left is written back
// with a future run time; no worker sleeps on it. An attempt whose lease
// cannot be renewed in time is canceled (cause ErrLeaseLost) before its
// lease ends, so a rescuer never runs the instance alongside. An executor
// that ignores its context past its timeout is abandoned: the attempt is
// recorded timed out and the goroutine, which Go cannot stop, keeps its
// worker slot until it returns (Manager.Stuck). Stop cancels the attempts
// still running when its ctx ends and hands back those whose executors
// return on that cancel; doc/design.md states these guarantees precisely.
//
// # States
//
//	Created → Scheduled → Processing → Completed | Terminated | Canceled | TimedOut
//
// Every transition is one HistoryRecord in the history, with the instance,
// kind, attempt, time, node and error or result. LookupInstances,
// LookupInstanceHistory and LookupInstanceLogs query them; retention
// (WithRetention, WithHistoryRetention, WithLogRetention) bounds them.
// Events follows them as they happen, across every manager sharing the
// store, and resumes from the Cursor of the last Event seen
// (WithEventCursor) while the store retains what followed it.
//
// # Recurring jobs
//
// WithCronSpec and WithInterval make a job recurring. Each tick is
// scheduled with a unique key made of the kind and the tick time, so every
// manager that registers the job schedules the same tick and the store keeps
// one: a tick runs once per cluster, not once per manager, and no leader is
// needed. A recurring job ticks at most once per MinInterval (a second);
// a spec that does not parse, never fires or ticks faster is an error
// wrapping ErrInvalidJob from NewJob. WithOverlapPolicy says what a tick
// does while an earlier run is still active (allow, forbid, replace), and
// WithMissedTickPolicy whether a starting manager catches up the latest
// tick missed while none ran.
//
// # Stored triggers
//
// A trigger is a cron or interval schedule kept in the store
// (store.Trigger), created at run time by any process with
// Admin.PutTrigger, paused and resumed with PauseTrigger and
// ResumeTrigger, and removed with DeleteTrigger; ListFireTimes reports
// when it fires next. Every manager with the scheduler role (the default,
// see WithScheduler) fires its ticks, each once per cluster, with the
// trigger's overlap and missed-tick policies.
package job
