package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
)

// TestVersion runs jobctl version against a real server with tokens: in
// JSON and YAML it reports jobctl's versions and the server's (the engine,
// the API jobkit.v1, the Go release), the table has a row for each, a
// viewer token may call it and no token may not, and --client prints
// jobctl's alone without a call.
func TestVersion(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, true)
	viewer := map[string]string{"JOBCTL_ADDR": s.url, "JOBCTL_TOKEN": viewerSecret}

	type versions struct {
		Client struct{ Version, EngineVersion, APIVersion, GoVersion string }
		Server *struct{ ServerVersion, EngineVersion, APIVersion, GoVersion string }
	}
	for _, format := range []string{"json", "yaml"} {
		r := jobctlEnv(t, viewer, "", "version", "-o", format)
		if r.code != 0 {
			t.Fatalf("jobctl version -o %s: exit %d\n%s%s", format, r.code, r.stdout, r.stderr)
		}
		b := []byte(r.stdout)
		if format == "yaml" {
			var err error
			if b, err = yamlToJSONForTest(b); err != nil {
				t.Fatalf("jobctl version -o yaml: %v\n%s", err, r.stdout)
			}
		}
		var v versions
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("jobctl version -o %s: %v\n%s", format, err, r.stdout)
		}
		if v.Client.Version == "" || v.Client.EngineVersion != job.Version || v.Client.APIVersion != client.APIVersion || v.Client.GoVersion != runtime.Version() {
			t.Errorf("jobctl version -o %s: client %+v; want engine %s, API %s, %s", format, v.Client, job.Version, client.APIVersion, runtime.Version())
		}
		if v.Server == nil || v.Server.ServerVersion == "" || v.Server.EngineVersion != job.Version || v.Server.APIVersion != "jobkit.v1" || v.Server.GoVersion != runtime.Version() {
			t.Errorf("jobctl version -o %s: server %+v; want engine %s, API jobkit.v1, %s\n%s", format, v.Server, job.Version, runtime.Version(), r.stdout)
		}
	}

	r := jobctlEnv(t, viewer, "", "version")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "VERSION") ||
		!strings.HasPrefix(lines[1], "client ") || !strings.HasPrefix(lines[2], "server ") || !strings.Contains(lines[2], "jobkit.v1") || r.stderr != "" {
		t.Errorf("jobctl version: exit %d, stdout:\n%s\nstderr: %s\nwant a header, a client row and a server row naming jobkit.v1", r.code, r.stdout, r.stderr)
	}

	if r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, "", "version"); r.code != 5 || !strings.Contains(r.stderr, "token") {
		t.Errorf("jobctl version without a token: exit %d, %q; want 5 naming the token", r.code, r.stderr)
	}

	r = jobctlEnv(t, map[string]string{"JOBCTL_ADDR": "http://" + deadAddr(t)}, "", "version", "--client", "-o", "json")
	var v versions
	if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil || v.Server != nil || v.Client.APIVersion != client.APIVersion {
		t.Errorf("jobctl version --client against no server: exit %d, %v, %q, %s; want 0 and the client's versions alone", r.code, err, r.stdout, r.stderr)
	}
}
