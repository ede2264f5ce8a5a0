package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/bench/internal/benchkit"
)

// asynqConfig says how the asynq servers are set up; zero keeps asynq's
// defaults.
type asynqConfig struct {
	name                     string
	taskCheckInterval        time.Duration // asynq default 1 s
	delayedTaskCheckInterval time.Duration // asynq default 5 s
	retryDelay               time.Duration // 0: asynq's default backoff
}

// asynqSystem is asynq on one redis-server. Each queue is an asynq queue
// of its own name.
type asynqSystem struct {
	cfg    asynqConfig
	opt    asynq.RedisClientOpt
	client *asynq.Client
	insp   *asynq.Inspector
	rdb    *redis.Client // for INFO memory and key cleanup
}

func newAsynq(addr string, cfg asynqConfig) *asynqSystem {
	opt := asynq.RedisClientOpt{Addr: addr, PoolSize: 64}
	return &asynqSystem{cfg: cfg, opt: opt, client: asynq.NewClient(opt), insp: asynq.NewInspector(opt),
		rdb: redis.NewClient(&redis.Options{Addr: addr})}
}

func (a *asynqSystem) Name() string { return a.cfg.name }

func (a *asynqSystem) Close() {
	a.client.Close()
	a.insp.Close()
	a.rdb.Close()
}

func (a *asynqSystem) Open(ctx context.Context) (benchkit.Queue, error) {
	return a.Attach(ctx, benchkit.NewNamespace("asynq"))
}

func (a *asynqSystem) Attach(_ context.Context, id string) (benchkit.Queue, error) {
	return &asynqQueue{sys: a, name: id}, nil
}

func (a *asynqSystem) ServerMemoryName() string { return "Redis used_memory" }

func (a *asynqSystem) Memory(ctx context.Context) (benchkit.Memory, error) {
	m := benchkit.Memory{Heap: benchkit.Heap()}
	var err error
	m.Server, err = benchkit.RedisUsedMemory(ctx, a.rdb)
	return m, err
}

type asynqQueue struct {
	sys  *asynqSystem
	name string
	srv  *asynq.Server
}

const asynqType = "bench"

func stampPayload(stamp int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(stamp))
	return b
}

func (q *asynqQueue) ID() string { return q.name }

// Fill enqueues n tasks from 32 goroutines: asynq has no batch enqueue.
func (q *asynqQueue) Fill(ctx context.Context, n int, due time.Time) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	p := stampPayload(due.UnixNano())
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := q.sys.client.EnqueueContext(ctx, asynq.NewTask(asynqType, p), asynq.Queue(q.name)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e, _ := firstErr.Load().(error); e != nil {
		return e
	}
	return nil
}

func (q *asynqQueue) Insert(ctx context.Context, stamp int64, due time.Time) error {
	opts := []asynq.Option{asynq.Queue(q.name)}
	if !due.IsZero() {
		opts = append(opts, asynq.ProcessAt(due))
	}
	_, err := q.sys.client.EnqueueContext(ctx, asynq.NewTask(asynqType, stampPayload(stamp)), opts...)
	return err
}

// Run starts an asynq server. Completed is called when the handler
// returns, before asynq marks the task done; Drained waits for that.
func (q *asynqQueue) Run(_ context.Context, workers int, h benchkit.Hooks) error {
	if q.srv != nil {
		return fmt.Errorf("asynq: Run while running")
	}
	c := q.sys.cfg
	cfg := asynq.Config{
		Concurrency:              workers,
		Queues:                   map[string]int{q.name: 1},
		TaskCheckInterval:        c.taskCheckInterval,
		DelayedTaskCheckInterval: c.delayedTaskCheckInterval,
		LogLevel:                 asynq.FatalLevel,
		ShutdownTimeout:          10 * time.Second,
	}
	if c.retryDelay > 0 {
		d := c.retryDelay
		cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return d }
	}
	srv := asynq.NewServer(q.sys.opt, cfg)
	err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		stamp := int64(binary.BigEndian.Uint64(t.Payload()))
		if h.Started != nil {
			h.Started(stamp)
		}
		if h.Hold != nil {
			h.Hold(ctx)
		}
		if h.Completed != nil {
			h.Completed(stamp)
		}
		return nil
	}))
	if err != nil {
		return err
	}
	q.srv = srv
	return nil
}

// Drained waits until asynq reports nothing pending, active, scheduled or
// waiting for retry in the queue.
func (q *asynqQueue) Drained(ctx context.Context) error {
	for {
		qi, err := q.sys.insp.GetQueueInfo(q.name)
		if err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (q *asynqQueue) Stop(context.Context) error {
	if q.srv != nil {
		q.srv.Shutdown()
		q.srv = nil
	}
	return nil
}

func (q *asynqQueue) Close(ctx context.Context) error {
	_ = q.sys.insp.DeleteQueue(q.name, true)
	unlink(ctx, q.sys.rdb, "asynq:{"+q.name+"}:*")
	return nil
}

func unlink(ctx context.Context, rdb *redis.Client, pattern string) {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...) // DEL, not UNLINK: memory figures must not see a lazy free still running
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}
