// Package benchkit holds the benchmark workloads of jobkit and the
// interface they drive, so cmd/jobkit-bench (jobkit alone) and the bench
// module (jobkit side by side with asynq and River) measure with the same
// code.
//
// A System is a job system under measurement: jobkit on one store, or a
// peer. Each workload opens a fresh Queue (its own namespace) on it, stores
// no-op jobs that carry one int64 stamp (a send or due time in Unix
// nanoseconds), runs workers whose Started hook sees the stamp when the
// executor starts, and computes its figure from those times. Every workload
// takes a time limit and reports when it was cut short.
package benchkit

import (
	"context"
	"errors"
	"time"
)

// System is a job system under measurement.
type System interface {
	// Name is the column the system's figures appear under.
	Name() string
	// Open returns a fresh, empty queue in a namespace of its own.
	Open(ctx context.Context) (Queue, error)
	// Attach returns a handle on the queue whose ID is id, from another
	// process (the recovery workload's worker process).
	Attach(ctx context.Context, id string) (Queue, error)
	// Close releases the system's clients.
	Close()
}

// Queue is one namespace of a System.
type Queue interface {
	// ID names the queue for Attach.
	ID() string
	// Fill stores n jobs due at due, as fast as the system allows (batches
	// where it has them). Each carries due.UnixNano() as its stamp.
	Fill(ctx context.Context, n int, due time.Time) error
	// Insert stores one job carrying stamp, due at due (zero: now), through
	// the system's ordinary one-job call.
	Insert(ctx context.Context, stamp int64, due time.Time) error
	// Run starts workers on the queue. It returns once they run.
	Run(ctx context.Context, workers int, h Hooks) error
	// Stop stops the workers started by Run, letting in-flight jobs end.
	Stop(ctx context.Context) error
	// Close removes what it can of the queue's data.
	Close(ctx context.Context) error
}

// Hooks are what a Queue's executor calls.
type Hooks struct {
	// Started is called first thing in the executor with the job's stamp.
	Started func(stamp int64)
	// Hold, when set, is called after Started and the executor returns
	// when it does (the recovery workload's worker blocks in it).
	Hold func(ctx context.Context)
	// Completed is called once the job's completion is recorded, or as
	// close to that as the system lets a caller see (the Queue's doc says).
	Completed func(stamp int64)
}

// Drainer is a Queue that can wait until the system itself records no
// pending or running job: a peer whose Completed hook fires before the
// completion is written calls it at the end of a burn-down.
type Drainer interface {
	Drained(ctx context.Context) error
}

// Memory is a system's memory use at one moment.
type Memory struct {
	Heap   int64 // this process's Go heap after GC, bytes
	Server int64 // the server's memory for the system's data, bytes (0: none)
}

// MemoryMeter is a System that can report its memory use.
type MemoryMeter interface {
	// ServerMemoryName says what Memory.Server measures ("" when nothing).
	ServerMemoryName() string
	Memory(ctx context.Context) (Memory, error)
}

// ErrCutShort marks a workload that hit its time limit; the figure it
// returns with the error covers only what finished.
var ErrCutShort = errors.New("cut short at its time limit")
