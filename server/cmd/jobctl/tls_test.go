package main

import (
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/server"
)

// TestTLSAndProtocols: against a TLS server, jobctl verifies the
// certificate with --tls-ca, refuses it without, skips the check with
// --insecure-skip-verify; over plain HTTP it speaks every protocol.
func TestTLSAndProtocols(t *testing.T) {
	t.Parallel()
	srv, err := server.New(server.Config{Namespaces: map[string]*job.Manager{"default": newTestManager(t, memdb.open(t, "default"))}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.EnableHTTP2 = true
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	hs.StartTLS()
	t.Cleanup(hs.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--tls-ca", ca, "kinds"}, exitOK, ""},
		{[]string{"--tls-ca", ca, "--protocol", "grpc", "kinds"}, exitOK, ""},
		{[]string{"kinds"}, exitError, "certificate"},
		{[]string{"--insecure-skip-verify", "kinds"}, exitOK, ""},
		{[]string{"--tls-ca", os.Args[0], "kinds"}, exitUsage, "no PEM certificate"},
	} {
		r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": hs.URL}, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("jobctl %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
	}

	s := newTestServer(t, false)
	for _, p := range []string{"connect", "grpc", "grpcweb"} {
		if out := s.ok(t, "--protocol", p, "schedule", "sum", "--args", "[1,2]"); !strings.Contains(out, "sum") {
			t.Errorf("--protocol %s: %s", p, out)
		}
	}
}
