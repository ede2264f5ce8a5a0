package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestOversizedRequest413 (issue 33): a request over the server's request
// limit (4 MiB) is HTTP 413 Content Too Large on the Connect protocol, not 429
// Too Many Requests, which tells a client to slow down and try again;
// the body keeps the Connect code resource_exhausted for Connect clients.
func TestOversizedRequest413(t *testing.T) {
	t.Parallel()
	p := startJobd(t, jobdBin(), nil, "--namespace", uniqueNS(t))
	post := func(path, body string, chunked bool) (int, string) {
		t.Helper()
		var rd io.Reader = strings.NewReader(body)
		if chunked { // no Content-Length: the server learns the size by reading
			rd = io.MultiReader(rd)
		}
		req, err := http.NewRequest("POST", p.api+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	check := func(what string, code int, body string) {
		t.Helper()
		var e struct{ Code, Message string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusRequestEntityTooLarge || e.Code != "resource_exhausted" || e.Message == "" {
			t.Errorf("%s: HTTP %d, body %.300s; want 413 with code resource_exhausted and a message", what, code, body)
		}
	}
	big := fmt.Sprintf(`{"kind": "k", "argsJson": "[%q]"}`, strings.Repeat("x", 5<<20))
	code, body := post("/jobkit.v1.JobService/Schedule", big, false)
	check("a 5 MiB Schedule with Content-Length", code, body)
	code, body = post("/jobkit.v1.JobService/Schedule", big, true)
	check("a 5 MiB Schedule, chunked", code, body)
	// A request within both limits is not affected.
	if code, body := post("/jobkit.v1.QueueService/ListQueues", "{}", false); code != http.StatusOK {
		t.Errorf("ListQueues: %d %s", code, body)
	}
}
