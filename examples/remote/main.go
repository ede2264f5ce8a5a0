// Command remote shows remote executors: a jobd server on the embedded
// store, and two worker processes (this same program, run again with
// -worker) that connect to it over one stream each, with different
// labels. Tasks that require the label gpu run only on the gpu worker; the
// others run on either. Then one encode task runs in four shards spread
// over both workers, and its parent gathers their results in shard order.
// It prints where each task and each shard ran, and exits.
//
// Each example is a module of its own; from the repository's root:
//
//	cd examples/remote && go run .
//
// A worker alone, against a jobd (doc/getting-started.md):
//
//	go run . -worker -addr http://127.0.0.1:8080 -token "$JOBCTL_TOKEN" -node w1 -labels gpu
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

func main() {
	worker := flag.Bool("worker", false, "run as a worker process (the program starts two itself)")
	addr := flag.String("addr", "", "jobd's URL (-worker)")
	node := flag.String("node", "", "the worker's node ID (-worker)")
	labels := flag.String("labels", "", "the worker's labels (-worker)")
	token := flag.String("token", "", "a token of jobd's --tokens-file, role worker or admin (-worker)")
	flag.Parse()
	var err error
	if *worker {
		err = runWorker(*addr, *token, *node, *labels)
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "remote:", err)
		os.Exit(1)
	}
}

// jobs are what both workers register: render runs anywhere, and
// render-gpu only where the label gpu is.
func jobs() []*job.Job {
	mk := func(opts ...job.JobOption) *job.Job {
		j, err := job.NewJob(append(opts, job.WithExecutor(func(frame int) string {
			return fmt.Sprintf("rendered frame %d", frame)
		}))...)
		if err != nil {
			panic(err)
		}
		return j
	}
	// encode is run as a sharded task: each shard encodes its part of
	// the video (it learns which from its Instance) and takes a moment, so
	// the shards run at once on both workers.
	encode, err := job.NewJob(job.WithKind("encode"), job.WithExecutor(func(ctx context.Context, ji job.Instance, seconds int) (string, error) {
		info := ji.Info()
		i, n := info.ShardIndex, info.ShardCount
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return fmt.Sprintf("seconds %d-%d encoded", i*seconds/n, (i+1)*seconds/n), nil
	}))
	if err != nil {
		panic(err)
	}
	return []*job.Job{mk(job.WithKind("render")), mk(job.WithKind("render-gpu"), job.WithRequiredLabels("gpu")), encode}
}

// run serves jobd in this process on the embedded store, starts the two
// workers, schedules tasks and prints where they ran.
func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// jobd: the API with remote executors, on the embedded memdb store.
	st, err := memdbstore.New()
	if err != nil {
		return err
	}
	// The scheduler's manager runs nothing itself (no workers); it
	// registers render only to schedule it.
	sched, err := job.NewManager(job.WithStore(st), job.WithWorkers(0), job.WithLogger(quiet))
	if err != nil {
		return err
	}
	for _, j := range jobs() {
		if err := sched.RegisterJob(j); err != nil {
			return err
		}
	}
	if err := sched.Start(ctx); err != nil {
		return err
	}
	defer sched.Stop(context.Background())
	api, err := server.New(server.Config{
		Namespaces:     map[string]*job.Manager{"default": sched},
		ExecutorStores: map[string]store.Store{"default": st},
		Logger:         quiet,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: api, Protocols: server.Protocols(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	url := "http://" + ln.Addr().String()
	fmt.Printf("jobd listening on %s (embedded store)\n", url)

	// Two worker processes: this program again, with -worker.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
			_ = w.Wait()
		}
	}()
	for _, w := range []struct{ node, labels string }{{"worker-gpu", "gpu"}, {"worker-cpu", "cpu"}} {
		cmd := exec.Command(self, "-worker", "-addr", url, "-node", w.node, "-labels", w.labels)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		workers = append(workers, cmd)
	}

	// Tasks: even frames need a gpu, odd ones run anywhere.
	var ids []string
	for frame := range 8 {
		kind := "render"
		if frame%2 == 0 {
			kind = "render-gpu"
		}
		ji, err := sched.ScheduleJob(ctx, kind, job.WithArguments(frame))
		if err != nil {
			return err
		}
		ids = append(ids, ji.ID)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ins, err := st.LookupInstances(wctx, &store.Query{States: []store.State{store.Completed}})
		if err != nil {
			return err
		}
		if len(ins) == len(ids) {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the tasks did not complete: %w", wctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	hist, err := st.LookupHistory(ctx, &store.Query{States: []store.State{store.Completed}})
	if err != nil {
		return err
	}
	ran := map[string]string{}
	for _, h := range hist {
		ran[h.InstanceID] = h.Node
	}
	for frame, id := range ids {
		ins, err := st.LookupInstances(ctx, &store.Query{InstanceID: id})
		if err != nil || len(ins) != 1 {
			return errors.Join(err, fmt.Errorf("instance %s not found", id))
		}
		need := "any worker"
		if len(ins[0].Labels) > 0 {
			need = strings.Join(ins[0].Labels, ",")
		}
		fmt.Printf("frame %d: %s (needs %s) ran on %s: %s\n", frame, ins[0].Kind, need, ran[id], ins[0].Result)
	}
	return sharded(wctx, sched, st)
}

// shards is how many shards the sharded task has.
const shards = 4

// sharded schedules one encode task in shards over both workers, waits
// for its parent, and prints where each shard ran and the results the
// parent gathered, in shard order.
func sharded(ctx context.Context, sched *job.Manager, st store.Store) error {
	p, err := sched.ScheduleJob(ctx, "encode", job.WithArguments(60), job.WithShards(shards))
	if err != nil {
		return err
	}
	for {
		ins, err := sched.LookupInstances(ctx, job.NewQuery(job.WithQueryInstance(p)))
		if err != nil {
			return err
		}
		if len(ins) == 1 && ins[0].State.Final() {
			if ins[0].State != job.Completed {
				return fmt.Errorf("the sharded task ended %v: %v", ins[0].State, ins[0].Error)
			}
			p = ins[0]
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sharded task did not complete: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	parts, err := st.LookupInstances(ctx, &store.Query{Parent: p.ID})
	if err != nil {
		return err
	}
	slices.SortFunc(parts, func(a, b *store.Instance) int { return a.ShardIndex - b.ShardIndex })
	for _, s := range parts {
		hist, err := st.LookupHistory(ctx, &store.Query{InstanceID: s.ID, States: []store.State{store.Completed}})
		if err != nil || len(hist) == 0 {
			return errors.Join(err, fmt.Errorf("shard %d (%s) has no Completed record", s.ShardIndex, s.ID))
		}
		fmt.Printf("shard %d of %d ran on %s: %s\n", s.ShardIndex, s.ShardCount, hist[len(hist)-1].Node, s.Result)
	}
	fmt.Printf("encode (%d shards) gathered in shard order: %v\n", shards, p.Results())
	return nil
}

// runWorker is one worker process: an ordinary Manager whose store is
// jobd, reached with remote.Dial.
func runWorker(addr, token, node, labels string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := remote.Dial(ctx, remote.Options{Address: addr, Token: token, NodeID: node, Logger: quiet})
	if err != nil {
		return err
	}
	defer st.Close()
	m, err := job.NewManager(job.WithStore(st), job.WithNodeID(node), job.WithLabels(strings.Split(labels, ",")...),
		job.WithWorkers(2), job.WithLogger(quiet),
		// Store the kinds' definitions, so that a jobd that registers
		// none of them (doc/getting-started.md) schedules them too.
		job.WithPublishDefinitions())
	if err != nil {
		return err
	}
	for _, j := range jobs() {
		if err := m.RegisterJob(j); err != nil {
			return err
		}
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("%s connected with labels [%s]\n", node, labels)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Stop(sctx); err != nil && !slices.Contains([]error{job.ErrNotRunning}, err) {
		return err
	}
	return nil
}
