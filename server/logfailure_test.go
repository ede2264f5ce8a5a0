package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSuccessfulCallsLogNoFailure: a call that succeeds, or that fails
// for the caller's own mistake, writes no "call failed" line to the
// server's log: an operator reading jobd's errors must see only real ones.
func TestSuccessfulCallsLogNoFailure(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, backends[0], Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c := e.dial(t, connectJSON, "", "")
	ctx := context.Background()
	if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.queue.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{})); err != nil {
		t.Fatal(err)
	}
	// A client error (unknown kind) is the caller's, not the server's.
	if _, err := c.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "no-such-kind"})); err == nil {
		t.Fatal("scheduling an unknown kind succeeded")
	}
	if got := logs.String(); strings.Contains(got, "call failed") {
		t.Errorf("successful or client-failed calls logged a failure:\n%s", got)
	}
}
