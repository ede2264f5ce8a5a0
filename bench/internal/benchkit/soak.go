package benchkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// SoakPoint is one sample of a soak run.
type SoakPoint struct {
	At        time.Duration // since the run started
	Scheduled int64         // jobs scheduled so far
	Completed int64         // jobs completed so far
	Heap      int64         // this process's Go heap after GC, bytes
	Server    int64         // the server's memory (MemoryMeter), bytes; 0 when none
}

// Soak schedules jobs one by one at rate per second from 8 producers for
// d while workers run them, on a manager with default settings (retention
// included), and samples memory every interval; each sample is passed to
// sample as it is taken. It shows whether memory stays flat under a steady
// load: with retention that keeps up, the finished instances kept stay
// near the retention bounds however long the run. It returns an error
// wrapping ErrCutShort when the system could not keep the rate (more than
// 5 s of scheduled work not yet completed at the end).
func Soak(ctx context.Context, sys System, rate int, d, interval time.Duration, workers int, sample func(SoakPoint)) error {
	meter, _ := sys.(MemoryMeter)
	q, err := sys.Open(ctx)
	if err != nil {
		return err
	}
	defer stopQueue(q)
	var completed, scheduled atomic.Int64
	if err := q.Run(ctx, workers, Hooks{Completed: func(int64) { completed.Add(1) }}); err != nil {
		return err
	}
	t0 := time.Now()
	end := t0.Add(d)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var insertErr atomic.Value
	var next atomic.Int64
	const producers = 8
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				at := t0.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
				if !at.Before(end) {
					return
				}
				if w := time.Until(at); w > 0 {
					select {
					case <-time.After(w):
					case <-stop:
						return
					}
				}
				if err := q.Insert(ctx, time.Now().UnixNano(), time.Time{}); err != nil {
					insertErr.Store(err)
					return
				}
				scheduled.Add(1)
			}
		})
	}
	take := func() error {
		p := SoakPoint{At: time.Since(t0).Round(time.Second), Scheduled: scheduled.Load(), Completed: completed.Load()}
		if meter != nil {
			m, err := meter.Memory(ctx)
			if err != nil {
				return err
			}
			p.Heap, p.Server = m.Heap, m.Server
		} else {
			p.Heap = Heap()
		}
		sample(p)
		return nil
	}
	if err := take(); err != nil {
		close(stop)
		wg.Wait()
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for now := range tick.C {
		if e, _ := insertErr.Load().(error); e != nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("soak: schedule: %w", e)
		}
		if err := take(); err != nil {
			close(stop)
			wg.Wait()
			return err
		}
		if !now.Before(end) {
			break
		}
	}
	close(stop)
	wg.Wait()
	if e, _ := insertErr.Load().(error); e != nil {
		return fmt.Errorf("soak: schedule: %w", e)
	}
	if behind := scheduled.Load() - completed.Load(); behind > int64(5*rate) {
		return fmt.Errorf("soak: %d scheduled jobs not completed at the end: %w", behind, ErrCutShort)
	}
	if s := scheduled.Load(); s < int64(float64(rate)*d.Seconds()*0.95) {
		return fmt.Errorf("soak: scheduled %d jobs, want %.0f: the producers could not keep the rate: %w", s, float64(rate)*d.Seconds(), ErrCutShort)
	}
	return nil
}
