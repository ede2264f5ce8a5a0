package main_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsNeedToken (issue 33): with --tokens-file, /metrics on the API
// port answers only a token of role metrics (or viewer and up) that
// covers every namespace served; /healthz and /readyz stay open for
// probes; on --metrics-listen, /metrics is served without a token and
// not on the API port.
func TestMetricsNeedToken(t *testing.T) {
	t.Parallel()
	prom := newToken("prometheus", "metrics", "*")
	viewer := newToken("viewer", "viewer", "*")
	blue := newToken("blue-viewer", "viewer", "blue")
	worker := newToken("worker", "worker", "*")
	tokens := writeTokens(t, prom, viewer, blue, worker)
	p := startJobd(t, jobdBin(), nil, "--namespace", "blue", "--namespace", "green", "--tokens-file", tokens)

	do := func(method, path, secret, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, p.api+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, resp.Header, b.String()
	}
	for _, tc := range []struct {
		name, secret string
		want         int
		body         string
	}{
		{"no token", "", http.StatusUnauthorized, "Authorization: Bearer"},
		{"unknown token", "not-a-token", http.StatusUnauthorized, "not accepted"},
		{"worker token", worker.secret, http.StatusForbidden, "role worker"},
		{"token of one namespace", blue.secret, http.StatusForbidden, "green"},
		{"metrics token", prom.secret, http.StatusOK, "jobkit_"},
		{"viewer token", viewer.secret, http.StatusOK, "jobkit_"},
	} {
		code, hdr, body := do("GET", "/metrics", tc.secret, "")
		if code != tc.want || !strings.Contains(body, tc.body) {
			t.Errorf("%s: GET /metrics: %d, want %d with %q; body:\n%.300s", tc.name, code, tc.want, tc.body, body)
		}
		if code == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without WWW-Authenticate: Bearer (got %q)", tc.name, hdr.Get("WWW-Authenticate"))
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, body := do("GET", path, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %q, want 200 (probes carry no token)", path, code, body)
		}
	}
	// A metrics token calls no API.
	if code, _, body := do("POST", "/jobkit.v1.QueueService/ListQueues", prom.secret, "{}"); code != http.StatusForbidden || !strings.Contains(body, "role metrics") {
		t.Errorf("ListQueues with a metrics token: %d %s, want 403 naming the role", code, body)
	}

	// With --metrics-listen: there without a token, not on the API port.
	q := startJobd(t, jobdBin(), nil, "--tokens-file", tokens, "--namespace", "blue", "--metrics-listen", "127.0.0.1:0")
	if code, body, err := get(q.health + "/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, "jobkit_") {
		t.Errorf("GET /metrics on --metrics-listen: %d %v", code, err)
	}
	if code, _, err := get(q.api + "/metrics"); err != nil || code == http.StatusOK {
		t.Errorf("GET /metrics on the API port with --metrics-listen: %d %v, want it not served there", code, err)
	}
}
