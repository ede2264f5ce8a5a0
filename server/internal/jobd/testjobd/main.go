// Command testjobd is jobd with three executors linked in, for the
// real-process tests of cmd/jobd (jobd itself runs none: executors as data
// come later). Its kinds:
//
//	echo  [s string]      returns s
//	sleep [ms int]        sleeps ms milliseconds (or until canceled)
//	block [path string]   runs until the file at path exists (or until canceled)
//
// With --publish-definitions (its own flag, taken off before jobd's) it
// stores their definitions, so other jobd processes on the store can
// schedule them. Every other argument is jobd's.
package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/server/internal/jobd"
)

func main() {
	args := os.Args[1:]
	opts := []jobd.Option{jobd.WithJobs(jobs)}
	if i := slices.Index(args, "--publish-definitions"); i >= 0 {
		args = slices.Delete(args, i, i+1)
		opts = append(opts, jobd.WithManagerOptions(job.WithPublishDefinitions()))
	}
	os.Exit(jobd.Main(args, os.Stdout, os.Stderr, opts...))
}

// jobs returns the test kinds, new for each namespace's manager.
func jobs(string) ([]*job.Job, error) {
	echo, err := job.NewJob(job.WithKind("echo"), job.WithExecutor(func(s string) (string, error) { return s, nil }))
	if err != nil {
		return nil, err
	}
	sleep, err := job.NewJob(job.WithKind("sleep"), job.WithExecutor(func(ctx context.Context, ms int) error {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}))
	if err != nil {
		return nil, err
	}
	block, err := job.NewJob(job.WithKind("block"), job.WithExecutor(func(ctx context.Context, path string) error {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := os.Stat(path); err == nil {
				return nil
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	}))
	if err != nil {
		return nil, err
	}
	return []*job.Job{echo, sleep, block}, nil
}
