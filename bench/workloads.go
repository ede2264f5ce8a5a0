package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/bench/internal/benchkit"
)

// params are the sizes and limits of one mode.
type params struct {
	mode string
	runs int
	env  env

	burnSizes, burnWorkers []int
	burnBigWorkers         int // sizes above 10k run with only this worker count (0: all)
	burnLimit              time.Duration

	steadyRate, steadyWorkers int
	steadyDur, steadyLimit    time.Duration

	idleN     int
	idleLimit time.Duration

	schedN                             int
	rateN                              int // ScheduleJob calls per rate run
	batchN                             int // jobs per batch run (1,000 per call)
	schedLead, schedSpread, schedLimit time.Duration

	memN int

	depths     []int
	depthK     int
	depthLimit time.Duration

	claimDepths  []int
	etcdClaimMax int
	claimLimit   time.Duration

	recK        int
	recLimit    time.Duration
	recDefaults bool // also measure the systems' default crash recovery (slow: asynq's takes minutes)
	recRuns     int
}

func quickParams() params {
	return params{
		runs:      3,
		burnSizes: []int{10_000}, burnWorkers: []int{64}, burnLimit: 20 * time.Second,
		steadyRate: 500, steadyWorkers: 8, steadyDur: 3 * time.Second, steadyLimit: 8 * time.Second,
		idleN: 10, idleLimit: 10 * time.Second,
		rateN: 20_000, batchN: 200_000,
		schedN: 40, schedLead: time.Second, schedSpread: 2 * time.Second, schedLimit: 9 * time.Second,
		memN:   10_000,
		depths: []int{1_000, 10_000}, depthK: 50, depthLimit: 15 * time.Second,
		claimDepths: []int{1_000, 10_000}, etcdClaimMax: 10_000, claimLimit: 5 * time.Second,
		recK: 4, recLimit: 40 * time.Second, recRuns: 1,
	}
}

func fullParams() params {
	return params{
		runs:        3,
		burnSizes:   []int{10_000, 100_000},
		burnWorkers: []int{8, 64}, burnBigWorkers: 64, burnLimit: 40 * time.Second,
		steadyRate: 1000, steadyWorkers: 8, steadyDur: 10 * time.Second, steadyLimit: 30 * time.Second,
		idleN: 40, idleLimit: 45 * time.Second,
		rateN: 100_000, batchN: 1_000_000,
		schedN: 200, schedLead: 2 * time.Second, schedSpread: 5 * time.Second, schedLimit: 20 * time.Second,
		memN:   100_000,
		depths: []int{1_000, 10_000, 100_000}, depthK: 100, depthLimit: 90 * time.Second,
		claimDepths: []int{1_000, 100_000, 1_000_000}, etcdClaimMax: 10_000, claimLimit: 120 * time.Second,
		recK: 4, recLimit: 150 * time.Second, recDefaults: true, recRuns: 3,
	}
}

// override replaces the burn-down sizes, worker counts and time limit
// with the flags' where they are set (issue 17: 100k jobs with 64
// workers alone).
func (p *params) override(sizes, workers string, limit time.Duration) error {
	parse := func(flagName, list string) ([]int, error) {
		var out []int
		for f := range strings.SplitSeq(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("-%s %q: want comma-separated positive integers", flagName, list)
			}
			out = append(out, n)
		}
		return out, nil
	}
	var err error
	if sizes != "" {
		if p.burnSizes, err = parse("burn-sizes", sizes); err != nil {
			return err
		}
	}
	if workers != "" {
		if p.burnWorkers, err = parse("burn-workers", workers); err != nil {
			return err
		}
		p.burnBigWorkers = 0
	}
	if limit > 0 {
		p.burnLimit = limit
	}
	return nil
}

// fig is one figure a workload reports.
type fig struct {
	key, label, unit string
	lower            bool // lower is better
	prec             int
}

// workload is one table of the report.
type workload struct {
	key      string // for -only
	parallel bool   // mostly waits: run side by side with the others of its kind at the end
	title    string
	about    string
	figs     []fig
	applies  func(sysSpec) bool
	run      func(ctx context.Context, s sysSpec, sys benchkit.System) benchkit.Result
}

func notRecovery(s sysSpec) bool { return !s.recovery }

func workloads(p params) []workload {
	var ws []workload
	for _, n := range p.burnSizes {
		for _, w := range p.burnWorkers {
			if n > 10_000 && p.burnBigWorkers > 0 && w != p.burnBigWorkers {
				continue
			}
			ws = append(ws, workload{
				key: "burndown", title: fmt.Sprintf("burn-down %s jobs, %d workers", count(n), w),
				about:   fmt.Sprintf("%s ready no-op jobs stored first (batched where the system can: jobkit store.Enqueue 1,000 per call, River InsertManyFast, asynq 32 concurrent Enqueue calls), then %d workers start; timed until the last completion is recorded. Limit %v per run.", count(n), w, p.burnLimit),
				figs:    []fig{{key: "jobs/s", label: "jobs/s", unit: "jobs/s", prec: 0}},
				applies: notRecovery,
				run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
					return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) { return benchkit.Burndown(ctx, sys, n, w, p.burnLimit) })
				},
			})
		}
	}
	ws = append(ws, workload{
		key: "schedule", title: "scheduling rate, no workers",
		about: fmt.Sprintf("%s ready jobs stored one call each (jobkit ScheduleJob, asynq Enqueue, River Insert) with no worker running, from 1 goroutine and then from 8; calls/s over the wall time and one call's latency (from the 1-goroutine run). Batch: %s jobs stored 1,000 per call, one call at a time (jobkit ScheduleJobs, River InsertMany; asynq has no batch call). Limit %v per run.", count(p.rateN), count(p.batchN), p.burnLimit),
		figs: []fig{{key: "1g calls/s", label: "1 goroutine", unit: "calls/s", prec: 0}, {key: "8g calls/s", label: "8 goroutines", unit: "calls/s", prec: 0},
			{key: "p50 µs", label: "p50 (1 goroutine)", unit: "µs", lower: true, prec: 0}, {key: "p99 µs", label: "p99 (1 goroutine)", unit: "µs", lower: true, prec: 0},
			{key: "batch jobs/s", label: "batch of 1,000", unit: "jobs/s", prec: 0}},
		applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) {
				out := benchkit.Sample{}
				s1, err := benchkit.ScheduleRate(ctx, sys, p.rateN, 1, p.burnLimit)
				for k, v := range s1 {
					if k == "calls/s" {
						k = "1g calls/s"
					}
					out[k] = v
				}
				if err != nil {
					return out, err
				}
				s8, err := benchkit.ScheduleRate(ctx, sys, p.rateN, 8, p.burnLimit)
				if v, ok := s8["calls/s"]; ok {
					out["8g calls/s"] = v
				}
				if err != nil {
					return out, err
				}
				sb, err := benchkit.BatchRate(ctx, sys, p.batchN, 1000, p.burnLimit)
				if v, ok := sb["jobs/s"]; ok {
					out["batch jobs/s"] = v
				}
				if err != nil && errors.Is(err, benchkit.ErrCutShort) {
					return out, err
				}
				return out, nil // no batch API: the cell stays empty
			})
		},
	}, workload{
		key: "steady", title: fmt.Sprintf("steady load %d jobs/s", p.steadyRate),
		about: fmt.Sprintf("%d jobs/s inserted one by one (4 producers) for %v while %d workers run them; pick-up latency = executor start − insert call. Limit %v per run.", p.steadyRate, p.steadyDur, p.steadyWorkers, p.steadyLimit),
		figs: []fig{{key: "p50 ms", label: "p50", unit: "ms", lower: true, prec: 2}, {key: "p99 ms", label: "p99", unit: "ms", lower: true, prec: 2},
			{key: "p999 ms", label: "p99.9", unit: "ms", lower: true, prec: 2}},
		applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) {
				return benchkit.Steady(ctx, sys, p.steadyRate, p.steadyDur, p.steadyWorkers, p.steadyLimit)
			})
		},
	}, workload{
		key: "rest", title: "at rest",
		about:   fmt.Sprintf("no jobs: %d workers wait for %v (for what an idle system costs its store: bench/pgcost.sh PGCOST_ONLY=rest).", p.steadyWorkers, p.steadyDur),
		figs:    []fig{{key: "s", label: "rested", unit: "s", prec: 1}},
		applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) { return benchkit.Rest(ctx, sys, p.steadyWorkers, p.steadyDur) })
		},
	}, workload{
		key: "idle", title: "idle latency",
		about:   fmt.Sprintf("%d jobs inserted one at a time on idle workers (each waits for the previous to start, then 1–5 ms); insert call → executor start. Limit %v per run.", p.idleN, p.idleLimit),
		figs:    []fig{{key: "p50 ms", label: "p50", unit: "ms", lower: true, prec: 3}, {key: "p99 ms", label: "p99", unit: "ms", lower: true, prec: 3}},
		applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) { return benchkit.Idle(ctx, sys, p.idleN, p.idleLimit) })
		},
	}, workload{
		key: "scheduled", title: "scheduled accuracy",
		about: fmt.Sprintf("%d jobs due %v to %v ahead, spread evenly (each at least 200 ms after its insert call, for stores slower to insert), with 8 workers running; start − due time (negative: early; asynq keeps due times in whole seconds, so its jobs can start up to a second early). Limit %v per run.", p.schedN, p.schedLead, p.schedLead+p.schedSpread, p.schedLimit),
		figs: []fig{{key: "p50 ms", label: "p50", unit: "ms", lower: true, prec: 2}, {key: "p99 ms", label: "p99", unit: "ms", lower: true, prec: 2},
			{key: "abs p99 ms", label: "p99 of |start − due|", unit: "ms", lower: true, prec: 2}, {key: "early %", label: "started early", unit: "%", lower: true, prec: 0}},
		applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) {
				return benchkit.Scheduled(ctx, sys, p.schedN, p.schedLead, p.schedSpread, p.schedLimit)
			})
		},
	}, workload{
		key: "memory", title: fmt.Sprintf("memory per pending job at %s", count(p.memN)),
		about: fmt.Sprintf("%s ready jobs stored with no worker; growth per job of this process's Go heap (after GC) and of the server's memory: Redis used_memory (jobkit-redis, -valkey, asynq), etcd dbSizeInUse (jobkit-etcd), PostgreSQL pg_total_relation_size('river_job') (River: on-disk table + indexes, not RAM).", count(p.memN)),
		figs: []fig{{key: "total B/job", label: "heap + server", unit: "B", lower: true, prec: 0},
			{key: "heap B/job", label: "Go heap", unit: "B", lower: true, prec: 0}, {key: "server B/job", label: "server", unit: "B", lower: true, prec: 0}},
		applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) { return benchkit.MemoryPerPending(ctx, sys, p.memN, p.burnLimit) })
		},
	})
	var dfigs []fig
	for _, d := range p.depths {
		dfigs = append(dfigs, fig{key: fmt.Sprintf("µs/job @%d", d), label: "@" + count(d), unit: "µs", lower: true, prec: 0})
	}
	ws = append(ws, workload{
		key: "depth", title: "cost per job vs queue depth, 1 worker",
		about: fmt.Sprintf("The queue is filled to each depth in turn; one worker runs %d jobs; time per job from the first start to the last completion (claim + run + record, end to end: the closest measure of claim cost that all three systems allow, since asynq and River expose no claim call). Limit %v per run.", p.depthK, p.depthLimit),
		figs:  dfigs, applies: notRecovery,
		run: func(ctx context.Context, _ sysSpec, sys benchkit.System) benchkit.Result {
			return benchkit.Repeat(p.runs, func() (benchkit.Sample, error) { return benchkit.DepthCost(ctx, sys, p.depths, p.depthK, p.depthLimit) })
		},
	})
	var cfigs []fig
	for _, d := range p.claimDepths {
		cfigs = append(cfigs, fig{key: fmt.Sprintf("µs @%d", d), label: "@" + count(d), unit: "µs", lower: true, prec: 1})
	}
	ws = append(ws, workload{
		key: "claim", title: "jobkit store.Claim + Finish vs queue depth",
		about:   fmt.Sprintf("jobkit only: one store.Claim of 1 instance and its Finish, mean over up to 2,000 rounds at each depth; the namespace is filled to the depth once and measured in %d passes (the runs), the median pass reported. The etcd store stops at %s: it stores a few hundred instances a second here, so deeper queues cannot be filled within the limit (and a million records with their MVCC history would not fit etcd's default 2 GiB quota). Limit %v per depth, fill included.", p.runs, count(p.etcdClaimMax), p.claimLimit),
		figs:    cfigs,
		applies: func(s sysSpec) bool { return s.peer == "" && !s.recovery },
		run: func(ctx context.Context, s sysSpec, sys benchkit.System) benchkit.Result {
			out := benchkit.Result{Sample: benchkit.Sample{}}
			var notes []string
			for _, d := range p.claimDepths {
				if s.store == "etcd" && d > p.etcdClaimMax {
					notes = append(notes, fmt.Sprintf("@%s not run on etcd", count(d)))
					continue
				}
				r := benchkit.Repeat(1, func() (benchkit.Sample, error) {
					return benchkit.ClaimCost(ctx, sys.(*benchkit.Jobkit), d, 2000, p.runs, p.claimLimit)
				})
				r.Runs = p.runs // passes over one filled queue
				if r.Err != nil {
					out.Err = r.Err
					return out
				}
				if v, ok := r.Sample["µs"]; ok {
					out.Sample[fmt.Sprintf("µs @%d", d)] = v
				}
				out.Runs = r.Runs
				if r.Cut {
					out.Cut = true
					notes = append(notes, r.Note)
					break // deeper queues take longer still
				}
			}
			out.Note = strings.Join(notes, "; ")
			return out
		},
	})
	ws = append(ws, workload{
		key: "recovery", title: "recovery after SIGKILL", parallel: true,
		about: fmt.Sprintf("A worker process (this program, `bench worker`) starts %d jobs that never end and is killed with SIGKILL; a worker starts at once in the benchmark process; time from the kill until the last of the %d jobs has started again. Each system recovers by its own mechanism: jobkit lease expiry + rescue, asynq's lease (30 s) + recoverer (every minute, not configurable) + retry delay, River's job rescuer (every 30 s, not configurable) after RescueStuckJobsAfter. The systems' recovery runs go side by side at the end of the benchmark (they mostly wait). Limit %v per run; %d run(s) per figure.", p.recK, p.recK, p.recLimit, p.recRuns),
		figs:  []fig{{key: "recovery s", label: "recovery", unit: "s", lower: true, prec: 2}},
		applies: func(s sysSpec) bool {
			if s.store == "memdb" {
				return false
			}
			return s.tuned || p.recDefaults
		},
		run: func(ctx context.Context, s sysSpec, sys benchkit.System) benchkit.Result {
			if s.name == "river" {
				return benchkit.Result{Note: "not run: River's default RescueStuckJobsAfter is 1 h, far past the limit"}
			}
			return benchkit.Repeat(p.recRuns, func() (benchkit.Sample, error) {
				return benchkit.Recovery(ctx, sys, spawner(s, p.env), p.recK, p.recLimit)
			})
		},
	})
	return ws
}

// count writes n as 10k, 1M, or 1,500.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
