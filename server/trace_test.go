package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	jobotel "github.com/jobkit/job/otel"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store/memdbstore"
)

// TestScheduleCarriesCallersTrace: a Schedule call with a traceparent
// header stores an instance whose metadata carries that trace (with the
// jobotel middleware on the Manager), so the run joins the caller's trace
// in whichever process runs it; a call without one carries none.
func TestScheduleCarriesCallersTrace(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(st), jobotel.New())
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("noop"), job.WithExecutor(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Namespaces: map[string]*job.Manager{"default": m}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	jobs := jobkitv1connect.NewJobServiceClient(http.DefaultClient, hs.URL)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := connect.NewRequest(&pb.ScheduleRequest{Kind: "noop"})
	req.Header().Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := jobs.Schedule(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if tp := res.Msg.GetInstance().GetMetadata()["traceparent"]; !strings.Contains(tp, traceID) {
		t.Fatalf("instance metadata traceparent %q, want the caller's trace %s", tp, traceID)
	}
	res, err = jobs.Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "noop"}))
	if err != nil {
		t.Fatal(err)
	}
	if md := res.Msg.GetInstance().GetMetadata(); len(md) != 0 {
		t.Fatalf("a call without a trace stored metadata %v", md)
	}
}
