package main_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// instanceJSON is the part of a Connect JSON Instance the tests read.
type instanceJSON struct {
	ID              string `json:"id"`
	Kind            string `json:"kind"`
	State           string `json:"state"`
	ResultJSON      string `json:"resultJson"`
	CancelRequested bool   `json:"cancelRequested"`
}

// callJSON makes a Connect JSON call and decodes the response into out
// (when the status is 200); it returns the status and the raw body.
func callJSON(t *testing.T, base, procedure, body string, header map[string]string, out any) (int, string) {
	t.Helper()
	code, raw := postJSON(t, base, procedure, body, header)
	if code == http.StatusOK && out != nil {
		if err := json.Unmarshal([]byte(raw), out); err != nil {
			t.Fatalf("%s: decode %s: %v", procedure, raw, err)
		}
	}
	return code, raw
}

// getInstanceJSON reads an instance over Connect JSON.
func getInstanceJSON(t *testing.T, base, id string, header map[string]string) (instanceJSON, int, string) {
	t.Helper()
	var resp struct {
		Instance instanceJSON `json:"instance"`
	}
	code, raw := callJSON(t, base, jobkitv1connect.JobServiceGetInstanceProcedure, fmt.Sprintf(`{"id":%q}`, id), header, &resp)
	return resp.Instance, code, raw
}

// waitStateJSON waits until GetInstance over Connect JSON says the
// instance is in state.
func waitStateJSON(t *testing.T, base, id, state string, header map[string]string) instanceJSON {
	t.Helper()
	var in instanceJSON
	waitFor(t, 20*time.Second, fmt.Sprintf("instance %s to be %s", id, state), func() (bool, string) {
		var code int
		var raw string
		in, code, raw = getInstanceJSON(t, base, id, header)
		return code == http.StatusOK && in.State == state, fmt.Sprintf("%d %s", code, raw)
	})
	return in
}

// scheduleJSON schedules over Connect JSON and returns the instance.
func scheduleJSON(t *testing.T, base, body string, header map[string]string) instanceJSON {
	t.Helper()
	var resp struct {
		Instance instanceJSON `json:"instance"`
	}
	code, raw := callJSON(t, base, jobkitv1connect.JobServiceScheduleProcedure, body, header, &resp)
	if code != http.StatusOK || resp.Instance.ID == "" {
		t.Fatalf("Schedule %s: %d %s; want 200 and an instance", body, code, raw)
	}
	return resp.Instance
}

// TestConnectJSONMemdb: curl's way (POST with a JSON body) through a jobd
// on memdb whose executors are linked in (testjobd): schedule, watch it
// complete, list it; bad input gets the right code and a message.
func TestConnectJSONMemdb(t *testing.T) {
	t.Parallel()
	p := startJobd(t, testjobdBin(), nil, "--workers", "2")
	in := scheduleJSON(t, p.api, `{"kind":"echo","argsJson":"[\"hello\"]"}`, nil)
	if in.State != "STATE_SCHEDULED" || in.Kind != "echo" {
		t.Errorf("scheduled instance %+v; want kind echo, STATE_SCHEDULED", in)
	}
	done := waitStateJSON(t, p.api, in.ID, "STATE_COMPLETED", nil)
	if done.ResultJSON != `["hello"]` {
		t.Errorf("result %q; want [\"hello\"]", done.ResultJSON)
	}
	var list struct {
		Instances []instanceJSON `json:"instances"`
	}
	if code, raw := callJSON(t, p.api, jobkitv1connect.JobServiceListInstancesProcedure, `{"filter":{"kind":"echo"}}`, nil, &list); code != http.StatusOK || len(list.Instances) != 1 || list.Instances[0].ID != in.ID {
		t.Errorf("ListInstances kind echo: %d %s; want the one instance", code, raw)
	}
	for _, tc := range []struct{ name, body, code, msg string }{
		{"malformed arguments", `{"kind":"echo","argsJson":"[1,"}`, "invalid_argument", "args"},
		{"arguments that do not fit", `{"kind":"echo","argsJson":"[1, 2]"}`, "invalid_argument", ""},
		{"unknown kind", `{"kind":"nope"}`, "not_found", "nope"},
		{"unknown field", `{"kind":"echo","colour":"red"}`, "invalid_argument", ""},
	} {
		code, raw := postJSON(t, p.api, jobkitv1connect.JobServiceScheduleProcedure, tc.body, nil)
		if code == http.StatusOK || !strings.Contains(raw, `"code":"`+tc.code+`"`) || !strings.Contains(raw, tc.msg) {
			t.Errorf("%s: %d %s; want code %s naming %q", tc.name, code, raw, tc.code, tc.msg)
		}
	}
}

// grpcConn dials the jobd at base ("http://host:port") with grpc-go.
func grpcConn(t *testing.T, base string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	target := strings.TrimPrefix(strings.TrimPrefix(base, "http://"), "https://")
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// grpcCtx is a context carrying the namespace and token of a call.
func grpcCtx(t *testing.T, ns, token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if ns != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "jobkit-namespace", ns)
	}
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

// apiRoundTrip schedules kindAdd [2, 3] through the jobd at base over
// gRPC, waits for the worker to run it, and reads it back COMPLETED with
// result [5].
func apiRoundTrip(t *testing.T, conn *grpc.ClientConn, ns, token string, w *worker) {
	t.Helper()
	var sr jobkitv1.ScheduleResponse
	if err := conn.Invoke(grpcCtx(t, ns, token), jobkitv1connect.JobServiceScheduleProcedure,
		&jobkitv1.ScheduleRequest{Kind: kindAdd, ArgsJson: "[2, 3]"}, &sr); err != nil {
		t.Fatalf("gRPC Schedule: %v", err)
	}
	id := sr.GetInstance().GetId()
	select {
	case got := <-w.started:
		if got != id {
			t.Fatalf("the worker started %s; want %s", got, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not start the instance scheduled through jobd within 20 s")
	}
	var gr jobkitv1.GetInstanceResponse
	waitFor(t, 20*time.Second, "the instance to complete", func() (bool, string) {
		err := conn.Invoke(grpcCtx(t, ns, token), jobkitv1connect.JobServiceGetInstanceProcedure, &jobkitv1.GetInstanceRequest{Id: id}, &gr)
		return err == nil && gr.GetInstance().GetState() == jobkitv1.State_STATE_COMPLETED, fmt.Sprint(gr.GetInstance().GetState(), err)
	})
	if r := gr.GetInstance().GetResultJson(); r != "[5]" {
		t.Errorf("result %q; want [5]", r)
	}
}

// TestGRPCRedis: a google.golang.org/grpc client schedules through jobd
// on Redis; a worker Manager of the test process on the same Redis
// namespace (the kind's definition stored by it) runs the instance.
func TestGRPCRedis(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	w := newRedisWorker(t, ns, 2, nil)
	p := startJobd(t, jobdBin(), nil, "--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns)
	apiRoundTrip(t, grpcConn(t, p.api, nil), "", "", w)
}

// TestEtcd: the same over Connect JSON through a jobd on etcd.
func TestEtcd(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	w := newEtcdWorker(t, ns, 2)
	p := startJobd(t, jobdBin(), nil, "--store", "etcd", "--etcd-endpoints", etcdEndpoints(t), "--namespace", ns)
	in := scheduleJSON(t, p.api, `{"kind":"add","argsJson":"[20, 22]"}`, nil)
	select {
	case <-w.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not start the instance scheduled through jobd within 20 s")
	}
	if done := waitStateJSON(t, p.api, in.ID, "STATE_COMPLETED", nil); done.ResultJSON != "[42]" {
		t.Errorf("result %q; want [42]", done.ResultJSON)
	}
	apiRoundTrip(t, grpcConn(t, p.api, nil), "", "", w)
}

// TestValkey: jobd on the Valkey store (valkey-go) against the test
// redis-server; the worker, on the Redis store of the same namespace (the
// two plugins share one key layout), runs what it schedules.
func TestValkey(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	w := newRedisWorker(t, ns, 2, nil)
	p := startJobd(t, jobdBin(), nil, "--store", "valkey", "--valkey-addr", redisAddr(t), "--namespace", ns)
	apiRoundTrip(t, grpcConn(t, p.api, nil), "", "", w)
}

// TestTwoJobdOneRedis: two jobd on one Redis namespace serve the same
// data with no leader: an instance scheduled on one is seen and canceled
// on the other, and each lists both as nodes.
func TestTwoJobdOneRedis(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	newRedisWorker(t, ns, 0, nil) // stores the definitions; runs nothing
	args := []string{"--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns}
	a := startJobd(t, jobdBin(), nil, append(args, "--node-id", "jobd-a")...)
	b := startJobd(t, jobdBin(), nil, append(args, "--node-id", "jobd-b")...)

	in := scheduleJSON(t, a.api, `{"kind":"add","argsJson":"[1, 2]","delay":"3600s"}`, nil)
	if got, code, raw := getInstanceJSON(t, b.api, in.ID, nil); code != http.StatusOK || got.State != "STATE_SCHEDULED" {
		t.Fatalf("GetInstance on the other jobd: %d %s; want it SCHEDULED", code, raw)
	}
	var cr struct {
		Instance instanceJSON `json:"instance"`
	}
	if code, raw := callJSON(t, b.api, jobkitv1connect.JobServiceCancelInstanceProcedure, fmt.Sprintf(`{"id":%q}`, in.ID), nil, &cr); code != http.StatusOK || cr.Instance.State != "STATE_CANCELED" {
		t.Fatalf("CancelInstance on the other jobd: %d %s; want CANCELED", code, raw)
	}
	if got, _, raw := getInstanceJSON(t, a.api, in.ID, nil); got.State != "STATE_CANCELED" {
		t.Errorf("GetInstance on the first jobd after the cancel: %s; want CANCELED", raw)
	}
	waitFor(t, 10*time.Second, "both jobd in ListNodes", func() (bool, string) {
		var nodes struct {
			Nodes []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"nodes"`
		}
		_, raw := callJSON(t, a.api, jobkitv1connect.NodeServiceListNodesProcedure, `{}`, nil, &nodes)
		live := map[string]bool{}
		for _, n := range nodes.Nodes {
			live[n.ID] = n.Status == "NODE_STATUS_LIVE"
		}
		return live["jobd-a"] && live["jobd-b"], raw
	})
}

// token is a secret and its tokens-file entry.
type token struct{ secret, entry string }

func newToken(name, role string, namespaces ...string) token {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	secret := hex.EncodeToString(b)
	sum := sha256.Sum256([]byte(secret))
	quoted := make([]string, len(namespaces))
	for i, ns := range namespaces {
		quoted[i] = fmt.Sprintf("%q", ns)
	}
	return token{secret, fmt.Sprintf("- name: %s\n  sha256: %s\n  role: %s\n  namespaces: [%s]\n", name, hex.EncodeToString(sum[:]), role, strings.Join(quoted, ", "))}
}

func writeTokens(t *testing.T, toks ...token) string {
	t.Helper()
	var b strings.Builder
	for _, tk := range toks {
		b.WriteString(tk.entry)
	}
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAuth: through the process, with a tokens file: a call with no
// token, a wrong token, a token of a role that may not, or a token of
// another namespace gets the right code and changes nothing.
func TestAuth(t *testing.T) {
	t.Parallel()
	viewer := newToken("viewer", "viewer", "blue")
	operator := newToken("operator", "operator", "blue")
	greenOp := newToken("green-operator", "operator", "green")
	p := startJobd(t, testjobdBin(), nil, "--workers", "2", "--namespace", "blue", "--namespace", "green",
		"--tokens-file", writeTokens(t, viewer, operator, greenOp))
	hdr := func(tk *token, ns string) map[string]string {
		h := map[string]string{"Jobkit-Namespace": ns}
		if tk != nil {
			h["Authorization"] = "Bearer " + tk.secret
		}
		return h
	}
	wrong := token{secret: "not-a-token"}
	schedule := `{"kind":"echo","argsJson":"[\"x\"]"}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
		code   string
	}{
		{"no token", hdr(nil, "blue"), http.StatusUnauthorized, "unauthenticated"},
		{"wrong token", hdr(&wrong, "blue"), http.StatusUnauthorized, "unauthenticated"},
		{"viewer schedules", hdr(&viewer, "blue"), http.StatusForbidden, "permission_denied"},
		{"operator of another namespace", hdr(&greenOp, "blue"), http.StatusForbidden, "permission_denied"},
		{"unknown namespace", hdr(&operator, "red"), http.StatusNotFound, "not_found"},
	} {
		code, raw := postJSON(t, p.api, jobkitv1connect.JobServiceScheduleProcedure, schedule, tc.header)
		if code != tc.status || !strings.Contains(raw, `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s; want %d %s", tc.name, code, raw, tc.status, tc.code)
		}
	}
	// gRPC sees the same codes.
	conn := grpcConn(t, p.api, nil)
	var sr jobkitv1.ScheduleResponse
	req := &jobkitv1.ScheduleRequest{Kind: "echo", ArgsJson: `["x"]`}
	if err := conn.Invoke(grpcCtx(t, "blue", ""), jobkitv1connect.JobServiceScheduleProcedure, req, &sr); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC Schedule with no token: %v; want Unauthenticated", err)
	}
	if err := conn.Invoke(grpcCtx(t, "blue", viewer.secret), jobkitv1connect.JobServiceScheduleProcedure, req, &sr); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC Schedule as viewer: %v; want PermissionDenied", err)
	}
	// Nothing changed: the viewer sees no instance in either namespace.
	for _, ns := range []string{"blue", "green"} {
		tk := viewer
		if ns == "green" {
			tk = greenOp
		}
		var list struct {
			Instances []instanceJSON `json:"instances"`
		}
		if code, raw := callJSON(t, p.api, jobkitv1connect.JobServiceListInstancesProcedure, `{}`, hdr(&tk, ns), &list); code != http.StatusOK || len(list.Instances) != 0 {
			t.Errorf("ListInstances in %s after the refused calls: %d %s; want 200 and none", ns, code, raw)
		}
	}
	// The operator may: its instance runs, and stays in its namespace.
	in := scheduleJSON(t, p.api, schedule, hdr(&operator, "blue"))
	waitStateJSON(t, p.api, in.ID, "STATE_COMPLETED", hdr(&viewer, "blue"))
	if _, code, raw := getInstanceJSON(t, p.api, in.ID, hdr(&greenOp, "green")); code != http.StatusNotFound {
		t.Errorf("the blue instance read in green: %d %s; want 404", code, raw)
	}
}

// TestTLS: with TLS and tokens jobd listens on a non-loopback address
// without --insecure; a gRPC client over TLS with a token is served.
func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	ns := uniqueNS(t)
	w := newRedisWorker(t, ns, 2, nil)
	op := newToken("ci", "operator", "*")
	p := startJobd(t, jobdBin(), nil, "--listen", "0.0.0.0:0", "--metrics-listen", "127.0.0.1:0",
		"--tls-cert", certFile, "--tls-key", keyFile, "--tokens-file", writeTokens(t, op),
		"--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns)
	if !strings.HasPrefix(p.api, "https://") {
		t.Fatalf("API at %s; want https", p.api)
	}
	port := p.api[strings.LastIndex(p.api, ":")+1:]
	conn := grpcConn(t, "127.0.0.1:"+port, credentials.NewTLS(&tls.Config{RootCAs: pool}))
	apiRoundTrip(t, conn, "", op.secret, w)
	// Plain HTTP on the TLS port is not served.
	if code, _, err := get("http://127.0.0.1:" + port + "/healthz"); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP on the TLS port answered %d", code)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their files and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jobd-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTriggers: jobd runs the scheduler of stored triggers (--scheduler,
// on by default): a trigger created over the API fires, and its instances
// run.
func TestTriggers(t *testing.T) {
	t.Parallel()
	p := startJobd(t, testjobdBin(), nil, "--workers", "2")
	code, raw := postJSON(t, p.api, jobkitv1connect.TriggerServiceCreateTriggerProcedure,
		`{"trigger":{"name":"tick","kind":"echo","argsJson":"[\"tick\"]","interval":"1s"}}`, nil)
	if code != http.StatusOK {
		t.Fatalf("CreateTrigger: %d %s", code, raw)
	}
	waitFor(t, 20*time.Second, "an instance of the trigger to complete", func() (bool, string) {
		var list struct {
			Instances []instanceJSON `json:"instances"`
		}
		_, raw := callJSON(t, p.api, jobkitv1connect.JobServiceListInstancesProcedure, `{"filter":{"kind":"echo","states":["STATE_COMPLETED"]}}`, nil, &list)
		return len(list.Instances) > 0 && list.Instances[0].ResultJSON == `["tick"]`, raw
	})
}
