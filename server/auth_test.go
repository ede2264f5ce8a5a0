package server

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestRoleTableCoversEveryProcedure: every procedure of the five services
// has a role, and nothing else does.
func TestRoleTableCoversEveryProcedure(t *testing.T) {
	var all []string
	for _, name := range serviceNames {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Fatal(err)
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			all = append(all, "/"+name+"/"+string(methods.Get(i).Name()))
		}
	}
	for _, p := range all {
		if _, ok := procedureRoles[p]; !ok {
			t.Errorf("procedure %s has no role", p)
		}
	}
	if len(procedureRoles) != len(all) {
		t.Errorf("%d procedures have roles, the services have %d", len(procedureRoles), len(all))
	}
	// Reads are the viewer's; writes are not.
	for p, r := range procedureRoles {
		read := strings.Contains(p, "/Get") || strings.Contains(p, "/List") || strings.HasSuffix(p, "/Watch") || strings.HasSuffix(p, "/FollowLogs")
		if read != (r == RoleViewer) {
			t.Errorf("%s needs %s", p, r)
		}
	}
}

// TestAuth: no token, a wrong one, the wrong role and the wrong namespace
// get the right code and change nothing; the right token works; health
// and reflection need none.
func TestAuth(t *testing.T) {
	tokens := []Token{
		{Name: "viewer", SHA256: HashToken("v-secret"), Role: RoleViewer, Namespaces: []string{"*"}},
		{Name: "operator", SHA256: HashToken("o-secret"), Role: RoleOperator, Namespaces: []string{"default"}},
		{Name: "admin", SHA256: HashToken("a-secret"), Role: RoleAdmin, Namespaces: []string{"default", "other"}},
		{Name: "worker", SHA256: HashToken("w-secret"), Role: RoleWorker, Namespaces: []string{"*"}},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{Tokens: tokens})
		ctx := context.Background()
		for _, p := range []protocol{protocols[0], connectJSON} {
			sched := func(token, ns string) error {
				_, err := e.dial(t, p, token, ns).jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]"}))
				return err
			}
			wantCode(t, sched("", ""), connect.CodeUnauthenticated, "Authorization: Bearer")
			wantCode(t, sched("wrong", ""), connect.CodeUnauthenticated, "not accepted")
			wantCode(t, sched("v-secret", ""), connect.CodePermissionDenied, "needs role operator", `"viewer"`)
			wantCode(t, sched("w-secret", ""), connect.CodePermissionDenied, "needs role operator", "worker")
			wantCode(t, sched("o-secret", "other"), connect.CodePermissionDenied, `may not use namespace "other"`)
			wantCode(t, sched("a-secret", "nowhere"), connect.CodeNotFound, `namespace "nowhere" is not served here; served: default, other`)
			// A token scoped to some namespaces is not told the names of
			// the others.
			err := sched("o-secret", "nowhere")
			wantCode(t, err, connect.CodeNotFound, `namespace "nowhere" is not served here; served: default (`)
			if strings.Contains(err.Error(), "other") {
				t.Errorf("a token for namespace default was told of namespace other: %v", err)
			}
			// An unknown namespace is not told to whom has no token.
			wantCode(t, sched("", "nowhere"), connect.CodeUnauthenticated)

			// Deleting is the admin's.
			_, err = e.dial(t, p, "o-secret", "").jobs.DeleteInstances(ctx, connect.NewRequest(&pb.DeleteInstancesRequest{All: true}))
			wantCode(t, err, connect.CodePermissionDenied, "needs role admin")
			// Streams are guarded too.
			st, err := e.dial(t, p, "", "").jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{}))
			if err == nil {
				st.Receive()
				err = st.Err()
			}
			wantCode(t, err, connect.CodeUnauthenticated)
		}
		for ns, m := range e.mgrs {
			if n := count(t, m); n != 0 {
				t.Fatalf("refused calls stored %d instances in %s", n, ns)
			}
		}
		// The right tokens work, each in its namespaces.
		if err := func() error {
			_, err := e.dial(t, connectJSON, "o-secret", "").jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]"}))
			return err
		}(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.dial(t, protocols[0], "a-secret", "other").jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]"})); err != nil {
			t.Fatal(err)
		}
		list, err := e.dial(t, protocols[4], "v-secret", "other").jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{}))
		if err != nil || len(list.Msg.GetInstances()) != 1 {
			t.Fatalf("viewer list in other: %v %v", list, err)
		}
		if count(t, e.mgrs["default"]) != 1 || count(t, e.mgrs["other"]) != 1 {
			t.Fatal("each namespace should hold its one instance")
		}
	})
}

// TestNewChecksConfig refuses configurations that cannot work, naming the
// fix.
func TestNewChecksConfig(t *testing.T) {
	m := newManager(t, backends[0].open(t, ""), &gate{})
	ns := map[string]*job.Manager{"default": m}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Namespaces is empty"},
		{Config{Namespaces: ns, DefaultNamespace: "prod"}, `DefaultNamespace "prod" is not served`},
		{Config{Namespaces: ns, MaxRequestBytes: -1}, "negative"},
		{Config{Namespaces: ns, Tokens: []Token{{Name: "t", SHA256: "abc", Role: RoleAdmin, Namespaces: []string{"*"}}}}, "HashToken"},
		{Config{Namespaces: ns, Tokens: []Token{{Name: "t", SHA256: HashToken("x"), Role: "root", Namespaces: []string{"*"}}}}, `unknown role "root"`},
		{Config{Namespaces: ns, Tokens: []Token{{Name: "t", SHA256: HashToken("x"), Role: RoleAdmin}}}, "no namespaces"},
		{Config{Namespaces: ns, Tokens: []Token{{Name: "t", SHA256: HashToken("x"), Role: RoleAdmin, Namespaces: []string{"prod"}}}}, `namespace "prod", which is not served`},
		{Config{Namespaces: map[string]*job.Manager{"a": nil}}, "nil *job.Manager"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
	if HashToken("abc") != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatal("HashToken is not hex SHA-256")
	}
	if _, err := New(Config{Namespaces: ns}); err != nil {
		t.Fatal(err)
	}
}

// TestNamespaceWithoutHeader: without the header a call goes to
// DefaultNamespace; when "default" is not served and none is named, it is
// NotFound naming the header.
func TestNamespaceWithoutHeader(t *testing.T) {
	a := newManager(t, backends[0].open(t, "a"), &gate{})
	b := newManager(t, backends[0].open(t, "b"), &gate{})
	for _, c := range []struct {
		def      string
		wantCode connect.Code
		inA      int
	}{
		{"", connect.CodeNotFound, 0},
		{"a", 0, 1},
	} {
		srv, err := New(Config{Namespaces: map[string]*job.Manager{"a": a, "b": b}, DefaultNamespace: c.def})
		if err != nil {
			t.Fatal(err)
		}
		e := &env{srv: srv, url: serve(t, srv)}
		_, err = e.dial(t, connectJSON, "", "").jobs.Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "add", ArgsJson: "[1,2]"}))
		if c.wantCode != 0 {
			wantCode(t, err, c.wantCode, `namespace "default" is not served here; served: a, b`, NamespaceHeader)
		} else if err != nil {
			t.Fatal(err)
		}
		if n := count(t, a); n != c.inA {
			t.Fatalf("default %q: %d instances in a, want %d", c.def, n, c.inA)
		}
		if n := count(t, b); n != 0 {
			t.Fatalf("default %q: %d instances in b", c.def, n)
		}
	}
}
