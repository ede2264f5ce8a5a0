// Command worker is a remote executor for the real-process tests of
// remote executors (package remotetest): an ordinary job.Manager whose
// store is a remote.Store connected to jobd. Its kinds:
//
//	noop                returns at once
//	sleep [ms int]      sleeps ms milliseconds (or until canceled)
//	fail                fails every attempt
//
// With -journal FILE it appends a line per attempt start and end
// ("<unix nanos> start|end <instance> <attempt> <node>") with O_APPEND,
// so a test can see whether two attempts of an instance overlapped. It
// prints "ready <node>" once its manager runs, and stops on SIGTERM or
// SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "", "jobd's base URL")
	token := flag.String("token", "", "bearer token")
	ns := flag.String("ns", "", "namespace")
	node := flag.String("node", "", "node ID")
	labels := flag.String("labels", "", "labels, comma-separated")
	slots := flag.Int("slots", 4, "worker slots")
	journal := flag.String("journal", "", "file to append attempt starts and ends to")
	fence := flag.Duration("dead-after", time.Second, "the cluster's dead threshold (heartbeats every quarter of it)")
	maxBackoff := flag.Duration("max-backoff", 0, "the longest wait between reconnections (0: remote's default)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := remote.Dial(dctx, remote.Options{Address: *addr, Token: *token, Namespace: *ns, NodeID: *node, Logger: log, MaxBackoff: *maxBackoff})
	if err != nil {
		return err
	}
	defer st.Close()

	var jf *os.File
	if *journal != "" {
		jf, err = os.OpenFile(*journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer jf.Close()
	}
	note := func(what string, ji job.Instance) {
		if jf != nil {
			fmt.Fprintf(jf, "%d %s %s %d %s\n", time.Now().UnixNano(), what, ji.Info().ID, ji.Info().Attempt, *node)
		}
	}
	opts := []job.ManagerOption{
		job.WithStore(st), job.WithWorkers(*slots), job.WithNodeID(*node), job.WithLogger(log),
		job.WithHeartbeat(*fence/4, *fence),
	}
	if *labels != "" {
		opts = append(opts, job.WithLabels(strings.Split(*labels, ",")...))
	}
	m, err := job.NewManager(opts...)
	if err != nil {
		return err
	}
	jobs := []*job.Job{}
	add := func(opts ...job.JobOption) error {
		j, err := job.NewJob(opts...)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
		return nil
	}
	if err := errors.Join(
		add(job.WithKind("noop"), job.WithExecutor(func(ctx context.Context, ji job.Instance) {
			note("start", ji)
			note("end", ji)
		})),
		add(job.WithKind("sleep"), job.WithExecutor(func(ctx context.Context, ji job.Instance, ms int) error {
			note("start", ji)
			defer note("end", ji)
			t := time.NewTimer(time.Duration(ms) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})),
		add(job.WithKind("fail"), job.WithExecutor(func() error { return errors.New("fails, as asked") })),
	); err != nil {
		return err
	}
	for _, j := range jobs {
		if err := m.RegisterJob(j); err != nil {
			return err
		}
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("ready %s\n", *node)
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	return m.Stop(sctx)
}
