package main

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/bench/internal/benchkit"
)

// errBaseline is what a baseline's queue answers to anything but storing.
var errBaseline = errors.New("a baseline only stores: it runs no jobs")

// rpushBaseline is no job system: it is the least a durable one-call
// enqueue into Redis can do, one RPUSH of the job's stamp through go-redis
// (the client asynq and jobkit-redis use), so that the schedule table
// shows the round trip every system's single call pays on this machine
// beside what each one adds to it. It takes part in the schedule workload
// only.
type rpushBaseline struct {
	rdb *redis.Client
}

func newRPushBaseline(addr string) *rpushBaseline {
	return &rpushBaseline{rdb: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})}
}

func (b *rpushBaseline) Name() string { return "redis-rpush" }

func (b *rpushBaseline) Close() { b.rdb.Close() }

func (b *rpushBaseline) Open(ctx context.Context) (benchkit.Queue, error) {
	return b.Attach(ctx, benchkit.NewNamespace("rpush"))
}

func (b *rpushBaseline) Attach(_ context.Context, id string) (benchkit.Queue, error) {
	return &rpushQueue{rdb: b.rdb, key: "bench:rpush:" + id}, nil
}

type rpushQueue struct {
	rdb *redis.Client
	key string
}

func (q *rpushQueue) ID() string { return q.key }

func (q *rpushQueue) Fill(context.Context, int, time.Time) error { return errBaseline }

func (q *rpushQueue) Insert(ctx context.Context, stamp int64, _ time.Time) error {
	return q.rdb.RPush(ctx, q.key, binary.BigEndian.AppendUint64(nil, uint64(stamp))).Err()
}

// InsertBatch pushes the stamps in one RPUSH.
func (q *rpushQueue) InsertBatch(ctx context.Context, stamps []int64) error {
	vals := make([]any, len(stamps))
	for i, s := range stamps {
		vals[i] = binary.BigEndian.AppendUint64(nil, uint64(s))
	}
	return q.rdb.RPush(ctx, q.key, vals...).Err()
}

func (q *rpushQueue) Run(context.Context, int, benchkit.Hooks) error { return errBaseline }

func (q *rpushQueue) Stop(context.Context) error { return nil }

func (q *rpushQueue) Close(ctx context.Context) error { return q.rdb.Del(ctx, q.key).Err() }
