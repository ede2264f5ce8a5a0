// Command redisworker is one process of the Redis fault tests
// (internal/faulttest/redisfault): a job.Manager on a shared redis-server
// that runs the test's jobs until it is told to stop (SIGTERM) or killed.
//
//	redisworker -addr 127.0.0.1:6379 -ns fault1 -node w1 -mode work
//
// Mode work runs "fault.work" jobs, each sleeping -sleep and recording its
// attempt in a Redis list, so the test can tell which node ran which
// attempt. Mode cron also registers "fault.tick", a job recurring every
// -interval, whose runs the test counts per tick.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store/redisstore"
)

func main() {
	var (
		addr     = flag.String("addr", "", "redis-server address")
		ns       = flag.String("ns", "", "store namespace")
		node     = flag.String("node", "", "node ID")
		mode     = flag.String("mode", "work", "work or cron")
		workers  = flag.Int("workers", 4, "workers")
		lease    = flag.Duration("lease", 2*time.Second, "lease length")
		sleep    = flag.Duration("sleep", 20*time.Millisecond, "how long a work job runs")
		interval = flag.Duration("interval", time.Second, "cron interval")
	)
	flag.Parse()
	if *addr == "" || *ns == "" || *node == "" {
		log.Fatal("redisworker: -addr, -ns and -node are required")
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	runs := "faulttest:{" + *ns + "}:runs"

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mgr, err := job.NewManager(
		job.WithStore(redisstore.New(rdb, redisstore.WithNamespace(*ns))),
		job.WithWorkers(*workers),
		job.WithNodeID(*node),
		job.WithLease(*lease),
		job.WithRescueInterval(100*time.Millisecond),
		job.WithPollInterval(200*time.Millisecond),
		job.WithLogger(logger),
	)
	if err != nil {
		log.Fatal(err)
	}
	work, err := job.NewJob(
		job.WithKind("fault.work"),
		job.WithMaxRetries(job.RetryForever),
		job.WithExecutor(func(ctx context.Context, ji job.Instance, n int) (int, error) {
			rec := fmt.Sprintf("%s %d %s %d", ji.ID(), ji.Attempt(), *node, time.Now().UnixMilli())
			// Record the run before the work, so a run cut short by a kill
			// is visible too. Retried until Redis answers.
			for rdb.RPush(ctx, runs, rec).Err() != nil {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				time.Sleep(50 * time.Millisecond)
			}
			select {
			case <-time.After(*sleep):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			return n * 2, nil
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(work); err != nil {
		log.Fatal(err)
	}
	if *mode == "cron" {
		tick, err := job.NewJob(
			job.WithKind("fault.tick"),
			job.WithInterval(*interval),
			job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
				rec := fmt.Sprintf("%s %d %s %d", ji.ID(), ji.RunAt().UnixMilli(), *node, time.Now().UnixMilli())
				return rdb.RPush(ctx, runs+":tick", rec).Err()
			}),
		)
		if err != nil {
			log.Fatal(err)
		}
		if err := mgr.RegisterJob(tick); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Start retries until Redis answers: a worker may start while the
	// server restarts.
	for {
		err := mgr.Start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		logger.Warn("start failed; retrying", "err", err)
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := mgr.Stop(sctx); err != nil {
		logger.Warn("stop", "err", err)
	}
}
