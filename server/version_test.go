package server

import (
	"context"
	"runtime"
	"testing"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestGetVersion calls NodeService.GetVersion in every protocol and
// through the Go client: it reports the server's version (Version), the
// engine's (job.Version), the API's (jobkit.v1, the client's APIVersion)
// and the Go release; it needs a token of role viewer or higher.
func TestGetVersion(t *testing.T) {
	tokens := []Token{
		{Name: "viewer", SHA256: HashToken("v-secret"), Role: RoleViewer, Namespaces: []string{"default"}},
		{Name: "worker", SHA256: HashToken("w-secret"), Role: RoleWorker, Namespaces: []string{"*"}},
	}
	e := newEnv(t, backends[0], Config{Tokens: tokens})
	ctx := context.Background()
	check := func(what string, v *pb.GetVersionResponse) {
		t.Helper()
		if v.GetServerVersion() != Version() || v.GetServerVersion() == "" || v.GetEngineVersion() != job.Version ||
			v.GetApiVersion() != "jobkit.v1" || v.GetApiVersion() != client.APIVersion || v.GetGoVersion() != runtime.Version() {
			t.Errorf("%s: %v; want server %s, engine %s, API jobkit.v1, %s", what, v, Version(), job.Version, runtime.Version())
		}
	}
	for _, p := range protocols {
		res, err := e.dial(t, p, "v-secret", "").nodes.GetVersion(ctx, connect.NewRequest(&pb.GetVersionRequest{}))
		if err != nil {
			t.Fatalf("%s: GetVersion: %v", p.name, err)
		}
		check(p.name, res.Msg)
	}
	if n, _ := e.gets.Load("/jobkit.v1.NodeService/GetVersion"); n == nil {
		t.Error("GetVersion was not served over GET (connect-json-get); it should be NO_SIDE_EFFECTS")
	}

	c, err := client.New(e.url, client.WithToken("v-secret"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.GetVersion(ctx)
	if err != nil {
		t.Fatalf("client.Version: %v", err)
	}
	check("client.Version", v)

	_, err = e.dial(t, connectJSON, "", "").nodes.GetVersion(ctx, connect.NewRequest(&pb.GetVersionRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated, "Authorization: Bearer")
	_, err = e.dial(t, connectJSON, "w-secret", "").nodes.GetVersion(ctx, connect.NewRequest(&pb.GetVersionRequest{}))
	wantCode(t, err, connect.CodePermissionDenied, "needs role viewer")
}
