package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/store"
	guard "github.com/jobkit/job/webhook"
)

// benchInstance is the part of job.Instance an attempt of the webhook
// executor calls; the rest is never called (and would panic).
type benchInstance struct {
	job.Instance
	id string
}

func (i benchInstance) ID() string                { return i.id }
func (i benchInstance) Kind() string              { return "bench" }
func (i benchInstance) Attempt() int              { return 1 }
func (i benchInstance) Debugf(string, ...any)     {}
func (i benchInstance) Infof(f string, a ...any)  { _ = fmt.Sprintf(f, a...) }
func (i benchInstance) Warnf(f string, a ...any)  { _ = fmt.Sprintf(f, a...) }
func (i benchInstance) Errorf(f string, a ...any) { _ = fmt.Sprintf(f, a...) }

// BenchmarkAttempt is one signed webhook attempt against an in-process
// no-op server, without the engine: the executor's own cost (the server's
// is in the figure too). BenchmarkPlainPOST is the same POST through a
// plain net/http client, for comparison.
func BenchmarkAttempt(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	allow, _ := guard.ParseAllowlist("127.0.0.1")
	typ := webhook.New(webhook.Options{Guard: &guard.Guard{Allow: allow}, Secrets: nodeSecrets})
	cfg, _ := json.Marshal(map[string]any{"url": srv.URL + "/{{index .Args 0}}", "secret_ref": "hook-key"})
	run, err := typ.New(&job.Definition{Kind: "bench", Executor: &store.ExecutorSpec{Type: store.ExecutorWebhook, Config: cfg}})
	if err != nil {
		b.Fatal(err)
	}
	args := []json.RawMessage{json.RawMessage(`"x"`)}
	inst := benchInstance{id: "0192d7a0-0000-7000-8000-000000000000"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := run(context.Background(), inst, args); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPlainPOST(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	body := []byte(`{"id":"0192d7a0-0000-7000-8000-000000000000","kind":"bench","attempt":1,"args":["x"]}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Post(srv.URL+"/x", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
