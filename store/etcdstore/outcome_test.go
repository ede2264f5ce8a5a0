package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store/etcdstore"
)

// freezer freezes a private etcd (SIGSTOP) at the moment its client
// sends the next write transaction, once armed: an Enqueue reads before
// it writes, and only a write that gets no answer leaves the outcome
// unknown.
type freezer struct {
	t     testing.TB
	p     *testserver.Process
	mu    sync.Mutex
	armed bool
	stop  bool // frozen, not yet resumed
}

func (f *freezer) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*pb.TxnRequest); ok && method == "/etcdserverpb.KV/Txn" {
		write := false
		for _, op := range txn.Success {
			write = write || op.GetRequestPut() != nil
		}
		f.mu.Lock()
		if write && f.armed {
			f.armed = false
			f.freeze()
		}
		f.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// freeze stops etcd; called with f.mu held. It returns once the kernel
// shows the process stopped: kill returns when the signal is sent, and a
// request sent right after could still be answered (seen in CI: a read
// meant to meet a frozen etcd got its answer, so the write after it went
// out and the outcome was unknown).
func (f *freezer) freeze() {
	pid := f.p.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		f.t.Errorf("SIGSTOP etcd: %v", err)
		return
	}
	f.stop = true
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, err := os.ReadFile(stat)
		if err != nil {
			f.t.Errorf("reading %s to see etcd stopped: %v", stat, err)
			return
		}
		// The state follows the command's closing parenthesis: T when
		// stopped by a signal.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		if time.Now().After(deadline) {
			f.t.Errorf("etcd (pid %d) not stopped 5 s after SIGSTOP: %s", pid, b)
			return
		}
		runtime.Gosched()
	}
}

func (f *freezer) resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
	if f.stop {
		f.stop = false
		if err := syscall.Kill(f.p.PID(), syscall.SIGCONT); err != nil {
			f.t.Errorf("SIGCONT etcd: %v", err)
		}
	}
}

// privateStore starts an etcd of t's own and returns a store on it whose
// client freezes the server when f is armed.
func privateStore(t *testing.T, ns string) (*etcdstore.Store, *freezer) {
	p := testserver.StartEtcd(t)
	f := &freezer{t: t, p: p}
	t.Cleanup(f.resume)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{p.Addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.interceptor)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return storeOn(t, cli, ns), f
}

func storeOn(t *testing.T, cli *clientv3.Client, ns string) *etcdstore.Store {
	s, err := etcdstore.New(cli, etcdstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A ScheduleJob whose deadline ends while etcd is frozen (SIGSTOP) after
// the enqueue's write transaction was sent says the outcome is unknown
// and names WithIdempotencyKey; the retry with the same key after SIGCONT
// leaves one instance. Before, the error said only that etcd did not
// answer in time.
func TestScheduleOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s, f := privateStore(t, "outcome")
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	refused := newClient(t, []string{"127.0.0.1:" + strconv.Itoa(port)})
	jobtest.OutcomeUnknown(t, jobtest.Stalled{
		Store:   s,
		Refused: storeOn(t, refused, "outcome"),
		Stall: func(testing.TB) func() {
			f.mu.Lock()
			f.armed = true
			f.mu.Unlock()
			return f.resume
		},
	})
}

// etcd frozen before an Enqueue's first read: nothing was written, so the
// error does not claim the outcome is unknown, and nothing is stored once
// etcd resumes. The call reads first because it schedules into a lane
// (here: a priority) its handle has not written to; a lone call into a
// lane it knows is one write with no read before it (enqueue_fast.go),
// and etcd frozen under that write leaves its outcome unknown
// (TestScheduleOutcomeUnknown).
func TestScheduleFrozenBeforeWriteIsCertain(t *testing.T) {
	t.Parallel()
	s, f := privateStore(t, "certain")
	j, err := job.NewJob(job.WithKind("certain"), job.WithExecutor(func(context.Context) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(t.Context(), "certain", job.WithScheduleAfter(time.Hour)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.freeze()
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	_, err = m.ScheduleJob(ctx, "certain", job.WithIdempotencyKey("k"), job.WithScheduleAfter(time.Hour), job.WithPriority(job.HighPriority))
	cancel()
	f.resume()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, job.ErrOutcomeUnknown) {
		t.Fatalf("ScheduleJob with etcd frozen before its read: %v; want context.DeadlineExceeded and not job.ErrOutcomeUnknown", err)
	}
	got, err := m.LookupInstances(t.Context(), job.NewQuery(job.WithQueryKind("certain")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d instances stored after a schedule that failed before writing, want 1 (the first)", len(got))
	}
}
