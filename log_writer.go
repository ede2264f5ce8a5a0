package job

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// logWriterDeps is what the log writer uses.
type logWriterDeps struct {
	store  store.Store
	clock  Clock
	node   string
	log    *slog.Logger
	writes *writeScope
	// changed is called after each batch, written or given up (it wakes
	// Manager.Wait).
	changed func()
}

// logWriter writes the log records of the manager's instances in
// batches, from Start to the end of Stop; before Start and after Stop it
// writes each record through. It is the logSink of every Instance the
// engine hands an executor or a handler.
type logWriter struct {
	logWriterDeps

	mu     sync.RWMutex // guards ch against sends after close
	ch     chan *store.LogRecord
	wg     sync.WaitGroup
	queued atomic.Int64 // records queued but not yet written
	lost   atomic.Int64 // records given up without being written
}

var _ service = (*logWriter)(nil)

func newLogWriter(d logWriterDeps) *logWriter { return &logWriter{logWriterDeps: d} }

func (w *logWriter) start() {
	w.mu.Lock()
	w.ch = make(chan *store.LogRecord, 8192)
	ch := w.ch
	w.mu.Unlock()
	w.wg.Add(1)
	go w.run(ch)
}

// halt closes the queue: records from then on are written through.
func (w *logWriter) halt() {
	w.mu.Lock()
	close(w.ch)
	w.ch = nil
	w.mu.Unlock()
}

// wait returns when what the queue held is written or given up (when the
// write scope is canceled).
func (w *logWriter) wait() { w.wg.Wait() }

// run writes instance logs in batches.
func (w *logWriter) run(ch <-chan *store.LogRecord) {
	defer w.wg.Done()
	batch := make([]*store.LogRecord, 0, 256)
	for r := range ch {
		batch = drainInto(append(batch[:0], r), ch)
		w.write(batch)
	}
}

// write writes one batch, retrying with backoff while the store fails
// and until Stop gives up; logs given up are counted as not recorded.
func (w *logWriter) write(batch []*store.LogRecord) {
	defer func() {
		w.queued.Add(-int64(len(batch)))
		w.changed()
	}()
	wctx := w.writes.ctx
	for try := 0; ; try++ {
		var err error
		if err = wctx.Err(); err != nil {
			err = fmt.Errorf("stopped before the store took them: %w", err)
		} else {
			ctx, cancel := context.WithTimeout(wctx, 10*time.Second)
			err = w.store.AppendLogs(ctx, batch)
			cancel()
		}
		if err == nil {
			return
		}
		// The retry delay paces calls to the store: a real-time wait,
		// ended by Stop giving up.
		if wctx.Err() != nil || try >= 5 || !sleep(SystemClock{}, retryDelay(try), wctx.Done()) {
			w.log.Error("write instance logs; dropping them", "count", len(batch), "err", err)
			w.writes.failed(err)
			w.lost.Add(int64(len(batch)))
			return
		}
	}
}

// appendLog implements logSink.
func (w *logWriter) appendLog(rec *store.LogRecord) {
	rec.Time = w.clock.Now()
	rec.Node = w.node
	w.mu.RLock()
	if w.ch != nil {
		w.queued.Add(1)
		select {
		case w.ch <- rec:
			w.mu.RUnlock()
			return
		default: // the buffer is full: write through rather than drop
			w.queued.Add(-1)
		}
	}
	w.mu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.store.AppendLogs(ctx, []*store.LogRecord{rec}); err != nil {
		w.log.Error("write instance log", "instance", rec.InstanceID, "err", err)
	}
}
