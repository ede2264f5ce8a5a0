package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// grpcConn dials the env with google.golang.org/grpc over plain TCP.
func grpcConn(t *testing.T, e *env) *grpc.ClientConn {
	t.Helper()
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestGRPCGoClient proves interop with grpc-go: unary calls, a server
// stream, status codes, health checking and reflection.
func TestGRPCGoClient(t *testing.T) {
	secret := "s3cret"
	e := newEnv(t, backends[0], Config{Tokens: []Token{{Name: "ops", SHA256: HashToken(secret), Role: RoleOperator, Namespaces: []string{"*"}}}})
	cc := grpcConn(t, e)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+secret)

	var res pb.ScheduleResponse
	if err := cc.Invoke(ctx, jobkitv1connect.JobServiceScheduleProcedure, &pb.ScheduleRequest{Kind: "greet", ArgsJson: `["grpc"]`}, &res); err != nil {
		t.Fatalf("Schedule over grpc-go: %v", err)
	}
	id := res.GetInstance().GetId()
	if id == "" {
		t.Fatalf("no instance: %v", &res)
	}
	waitFor(t, "the instance to complete", func() bool {
		var got pb.GetInstanceResponse
		if err := cc.Invoke(ctx, jobkitv1connect.JobServiceGetInstanceProcedure, &pb.GetInstanceRequest{Id: id}, &got); err != nil {
			t.Fatal(err)
		}
		return got.GetInstance().GetState() == pb.State_STATE_COMPLETED && got.GetInstance().GetResultJson() == `["hi grpc"]`
	})

	// A server stream: the logs, ending as the instance is final.
	desc := &grpc.StreamDesc{StreamName: "FollowLogs", ServerStreams: true}
	st, err := cc.NewStream(ctx, desc, jobkitv1connect.JobServiceFollowLogsProcedure)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&pb.FollowLogsRequest{InstanceId: id}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for {
		var r pb.FollowLogsResponse
		if err := st.RecvMsg(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("FollowLogs over grpc-go: %v", err)
		}
		msgs = append(msgs, r.GetRecord().GetMessage())
	}
	if !slices.Equal(msgs, []string{"hello grpc", "bye grpc"}) {
		t.Fatalf("logs %q", msgs)
	}

	// Status codes reach grpc-go as codes.
	var miss pb.GetInstanceResponse
	err = cc.Invoke(ctx, jobkitv1connect.JobServiceGetInstanceProcedure, &pb.GetInstanceRequest{Id: "00000000-0000-0000-0000-000000000000"}, &miss)
	if status.Code(err) != codes.NotFound {
		t.Fatalf("missing instance over grpc-go: %v, want NotFound", err)
	}
	err = cc.Invoke(context.Background(), jobkitv1connect.JobServiceGetInstanceProcedure, &pb.GetInstanceRequest{Id: id}, &miss)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token over grpc-go: %v, want Unauthenticated", err)
	}

	// Health checking and reflection need no token.
	hc := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", jobkitv1connect.JobServiceName, jobkitv1connect.NodeServiceName} {
		h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v, %v", svc, h, err)
		}
	}
	rc, err := reflectpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{ListServices: "*"}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rc.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range append(slices.Clone(serviceNames), "grpc.health.v1.Health") {
		if !slices.Contains(names, want) {
			t.Fatalf("reflection lists %v, not %s", names, want)
		}
	}
	if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "jobkit.v1.JobService"}}); err != nil {
		t.Fatal(err)
	}
	if rr, err = rc.Recv(); err != nil || len(rr.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("reflection of jobkit.v1.JobService: %v, %v", rr, err)
	}
	if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.health.v1.Health"}}); err != nil {
		t.Fatal(err)
	}
	if rr, err = rc.Recv(); err != nil || len(rr.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("reflection of grpc.health.v1.Health: %v, %v", rr, err)
	}
	_ = rc.CloseSend()

	// Drain: every service NOT_SERVING.
	e.srv.Drain()
	for _, svc := range []string{"", jobkitv1connect.JobServiceName} {
		h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health of %q after Drain: %v, %v", svc, h, err)
		}
	}
	// And connect's own health client sees the same.
	ch := grpchealth.NewClient(httpClient(t, true, "", ""), e.url, connect.WithGRPC())
	if h, err := ch.Check(context.Background(), &grpchealth.CheckRequest{Service: jobkitv1connect.QueueServiceName}); err != nil || h.Status != grpchealth.StatusNotServing {
		t.Fatalf("connect health after Drain: %v, %v", h, err)
	}
}

// post sends a Connect unary call as curl would: a JSON body over HTTP/1.1.
func post(t *testing.T, e *env, procedure, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s answered %d with %q, not JSON", req.Method, req.URL.Path, res.StatusCode, raw)
	}
	return res.StatusCode, out
}

// TestPlainHTTPJSON calls the API as curl does: POST with a JSON body,
// GET with the message in the query, and checks the JSON error bodies.
func TestPlainHTTPJSON(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		code, out := post(t, e, jobkitv1connect.JobServiceScheduleProcedure, `{"kind": "add", "argsJson": "[40, 2]", "priority": 7, "maxRetries": 0, "timeout": "30s"}`, nil)
		if code != http.StatusOK {
			t.Fatalf("schedule: %d %v", code, out)
		}
		in := out["instance"].(map[string]any)
		id := in["id"].(string)
		if in["priority"] != float64(7) || in["timeout"] != "30s" || in["state"] != "STATE_SCHEDULED" || in["maxRetries"] != nil {
			t.Fatalf("scheduled instance %v", in)
		}
		// The snake_case names of the .proto file work as well.
		if code, out := post(t, e, jobkitv1connect.JobServiceScheduleProcedure, `{"kind": "add", "args_json": "[1, 1]"}`, nil); code != http.StatusOK {
			t.Fatalf("schedule with proto names: %d %v", code, out)
		}

		// GET: a read-only call with the message in the query string.
		get := func() map[string]any {
			q := url.Values{"connect": {"v1"}, "encoding": {"json"}, "message": {`{"id":"` + id + `"}`}}
			req, err := http.NewRequest(http.MethodGet, e.url+jobkitv1connect.JobServiceGetInstanceProcedure+"?"+q.Encode(), nil)
			if err != nil {
				t.Fatal(err)
			}
			code, out := do(t, req)
			if code != http.StatusOK {
				t.Fatalf("GET instance: %d %v", code, out)
			}
			return out["instance"].(map[string]any)
		}
		waitFor(t, "the instance to complete", func() bool { return get()["state"] == "STATE_COMPLETED" })
		if got := get(); got["resultJson"] != "[42]" {
			t.Fatalf("completed over GET: %v", got)
		}
		// GET of a call with side effects is refused.
		req, _ := http.NewRequest(http.MethodGet, e.url+jobkitv1connect.JobServiceScheduleProcedure+"?connect=v1&encoding=json&message=%7B%7D", nil)
		if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode == http.StatusOK {
			t.Fatalf("GET Schedule: %v %v, want refused", res, err)
		}

		// Errors are JSON with a code and a message naming the fix.
		for _, c := range []struct {
			body, code string
			words      []string
		}{
			{`{"kind": "add", "argsJson": "[1, 2]", "colour": "red"}`, "invalid_argument", []string{"colour"}},
			{`{"kind": "add", "argsJson": "[1, "}`, "invalid_argument", []string{"not valid JSON", "JSON array"}},
			{`{"kind": "add", "argsJson": "{\"a\": 1}"}`, "invalid_argument", []string{"not a JSON array"}},
			{`{"kind": "add", "argsJson": "[\"x\", 1]"}`, "invalid_argument", []string{"argument 1", "int"}},
			{`{"kind": "add", "argsJson": "[1]"}`, "invalid_argument", []string{"1 arguments", "takes 2"}},
			{`{"kind": "nope"}`, "not_found", []string{`unknown kind "nope"`, "create its definition (DefinitionService.CreateDefinition), or start a worker that registers it"}}, // the API's fix, not Go's RegisterJob
			{`{"argsJson": "[]"}`, "invalid_argument", []string{"kind is required"}},
			{`{"kind": "add", "argsJson": "[1, 2]", "runAt": "2030-01-01T00:00:00Z", "delay": "1s"}`, "invalid_argument", []string{"run_at and delay"}},
			{`{"kind": "add", "argsJson": "[1, 2]", "maxRetries": -5}`, "invalid_argument", []string{"max retries"}},
			{`not json`, "invalid_argument", nil},
		} {
			code, out := post(t, e, jobkitv1connect.JobServiceScheduleProcedure, c.body, nil)
			msg, _ := out["message"].(string)
			if code == http.StatusOK || out["code"] != c.code {
				t.Fatalf("%s: %d %v, want %s", c.body, code, out, c.code)
			}
			for _, w := range c.words {
				if !strings.Contains(msg, w) {
					t.Fatalf("%s: message %q does not say %q", c.body, msg, w)
				}
			}
		}
		if n := count(t, e.mgrs["default"]); n != 2 {
			t.Fatalf("%d instances stored, want the 2 good ones", n)
		}
	})
}

// TestRequestSizeLimit refuses a request above MaxRequestBytes with
// ResourceExhausted naming the limit, in every protocol, and stores
// nothing.
func TestRequestSizeLimit(t *testing.T) {
	e := newEnv(t, backends[0], Config{MaxRequestBytes: 1 << 10})
	big := `["` + strings.Repeat("x", 2<<10) + `"]`
	for _, p := range protocols[:4] {
		c := e.dial(t, p, "", "")
		_, err := c.jobs.Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "greet", ArgsJson: big}))
		wantCode(t, err, connect.CodeResourceExhausted, "larger than configured max 1024")
	}
	body, _ := json.Marshal(map[string]string{"kind": "greet", "argsJson": big})
	code, out := post(t, e, jobkitv1connect.JobServiceScheduleProcedure, string(body), nil)
	if code != http.StatusRequestEntityTooLarge || out["code"] != "resource_exhausted" {
		t.Fatalf("big JSON body: %d %v, want 413 resource_exhausted", code, out)
	}
	if n := count(t, e.mgrs["default"]); n != 0 {
		t.Fatalf("%d instances stored", n)
	}
	// Just under the limit is fine.
	small := `["` + strings.Repeat("x", 900) + `"]`
	if _, err := e.dial(t, protocols[0], "", "").jobs.Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "greet", ArgsJson: small})); err != nil {
		t.Fatal(err)
	}
}
