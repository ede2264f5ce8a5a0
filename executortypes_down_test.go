package job_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// defsDownStore fails every read of the stored definitions while down is
// set, as a store whose server is not up yet does.
type defsDownStore struct {
	store.Store
	down atomic.Bool
}

func (s *defsDownStore) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	if s.down.Load() {
		return nil, syscall.ECONNREFUSED
	}
	return s.Store.GetDefinition(ctx, kind)
}

func (s *defsDownStore) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	if s.down.Load() {
		return nil, syscall.ECONNREFUSED
	}
	return s.Store.ListDefinitions(ctx, p)
}

// lockedBuffer is a log sink the manager's goroutines write to while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A manager set up while its store is unreachable registers and starts
// (the Go-function-versus-definition check cannot read the definitions
// then), and checks again once the store answers: a kind stored with an
// executor meanwhile is reported as an error in the log.
func TestGoKindCheckedOnceStoreIsUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMemdb(t)
		admin := newManager(t, job.WithStore(mem), job.WithWorkers(0), job.WithExecutorTypes(echoType{"wasm"}))
		if _, err := admin.Admin().PutDefinition(ctx, echoDef("data", `{"prefix":"x"}`), 0); err != nil {
			t.Fatal(err)
		}

		s := &defsDownStore{Store: mem}
		s.down.Store(true)
		var logs lockedBuffer
		m := newManager(t, job.WithStore(s), job.WithWorkers(1),
			job.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err := m.RegisterJob(mustJob(t, job.WithKind("data"), job.WithExecutor(func() {}))); err != nil {
			t.Fatalf("RegisterJob with the definitions unreadable: %v, want nil (Start checks again)", err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatalf("Start with the definitions unreadable: %v, want nil (checked again in the background)", err)
		}
		if !strings.Contains(logs.String(), "checking again in the background") {
			t.Fatalf("Start did not say it checks again; log:\n%s", logs.String())
		}

		time.Sleep(5 * time.Second) // the store is still down: tries at 1 s and 3 s fail
		if strings.Contains(logs.String(), "level=ERROR") {
			t.Fatalf("an error before the store answered; log:\n%s", logs.String())
		}
		s.down.Store(false)
		time.Sleep(30 * time.Second) // the next try, at most 30 s later
		synctest.Wait()
		out := logs.String()
		if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, job.ErrDuplicateKind.Error()) || !strings.Contains(out, `\"data\"`) {
			t.Fatalf("the conflict was not reported once the store answered; log:\n%s", out)
		}
	})
}

// A manager whose store holds no conflicting definition starts on an
// unreachable store and reports nothing once it answers.
func TestGoKindRecheckQuietWithoutConflict(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &defsDownStore{Store: newMemdb(t)}
		s.down.Store(true)
		var logs lockedBuffer
		m := newManager(t, job.WithStore(s), job.WithWorkers(1),
			job.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err := m.RegisterJob(mustJob(t, job.WithKind("code"), job.WithExecutor(func() {}))); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.down.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		out := logs.String()
		if strings.Contains(out, "level=ERROR") {
			t.Fatalf("an error without a conflict; log:\n%s", out)
		}
		time.Sleep(time.Minute) // the check succeeded once: no more tries
		synctest.Wait()
		if after := logs.String(); after != out {
			t.Fatalf("the check went on after it succeeded; new log lines:\n%s", strings.TrimPrefix(after, out))
		}
	})
}

// A manager with executor types starts while the stored definitions cannot
// be read, and runs a data kind once the store answers (the sync loop
// reads them again), instead of failing Start.
func TestExecutorTypesStartBeforeStoreAnswers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMemdb(t)
		prod := newManager(t, job.WithStore(mem), job.WithWorkers(0))
		if _, err := prod.Admin().PutDefinition(ctx, echoDef("data", `{"prefix":"x"}`), 0); err != nil {
			t.Fatal(err)
		}
		s := &defsDownStore{Store: mem}
		s.down.Store(true)
		w := newManager(t, job.WithStore(s), job.WithWorkers(1), job.WithExecutorTypes(echoType{"wasm"}))
		if err := w.Start(ctx); err != nil {
			t.Fatalf("Start with the definitions unreadable: %v, want nil (read again by the sync loop)", err)
		}
		inst, err := prod.ScheduleJob(ctx, "data", job.WithArguments("a"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if i, err := prod.GetInstance(ctx, inst.ID); err != nil || i.State == job.Completed {
			t.Fatalf("before the definitions could be read: %v, %v; want it waiting", i, err)
		}
		s.down.Store(false)
		time.Sleep(job.DefaultExecutorSync + 5*time.Second)
		synctest.Wait()
		i, err := prod.GetInstance(ctx, inst.ID)
		if err != nil || i.State != job.Completed {
			t.Fatalf("after the store answered: %v, %v; want Completed", i, err)
		}
	})
}
