package server_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store/memdbstore"
)

// Serve one namespace with an operator token, and schedule over the
// Connect protocol with JSON, as any HTTP client could.
func Example() {
	st, err := memdbstore.New()
	if err != nil {
		log.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(st))
	if err != nil {
		log.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("add"), job.WithExecutor(func(a, b int) int { return a + b }))
	if err != nil {
		log.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Namespaces: map[string]*job.Manager{"default": m},
		Tokens:     []server.Token{{Name: "ci", SHA256: server.HashToken("secret"), Role: server.RoleOperator, Namespaces: []string{"*"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	// jobd serves it with an http.Server{Handler: srv, Protocols: server.Protocols()}.
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.Protocols = server.Protocols()
	hs.Start()
	defer hs.Close()

	jobs := jobkitv1connect.NewJobServiceClient(http.DefaultClient, hs.URL, connect.WithProtoJSON())
	req := connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1, 2]"})
	if _, err := jobs.Schedule(context.Background(), req); err != nil {
		fmt.Println(connect.CodeOf(err))
	}
	req.Header().Set("Authorization", "Bearer secret")
	res, err := jobs.Schedule(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Msg.GetInstance().GetKind(), res.Msg.GetInstance().GetArgsJson(), res.Msg.GetInstance().GetState())
	// Output:
	// unauthenticated
	// add [1,2] STATE_SCHEDULED
}
