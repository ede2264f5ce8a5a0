package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store/memdbstore"
)

// recordingClient records the gRPC encoding headers of the calls it makes.
type recordingClient struct {
	base *http.Client
	mu   sync.Mutex
	// accept and got are the request's Grpc-Accept-Encoding and the
	// response's Grpc-Encoding of every call.
	accept, got []string
}

func (c *recordingClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.base.Do(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.accept = append(c.accept, r.Header.Get("Grpc-Accept-Encoding"))
	if resp != nil {
		c.got = append(c.got, resp.Header.Get("Grpc-Encoding"))
	}
	return resp, err
}

// TestExecutorSessionUncompressed: a worker neither asks for nor gets
// gzipped messages. Compressing every small message of a session (each
// push of tasks, each reply) was the largest single cost jobd paid per
// remote task.
func TestExecutorSessionUncompressed(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	hc := &recordingClient{base: httpClient(t, true, "", "")}
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "n1", HTTPClient: hc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, err := rs.ListQueues(t.Context()); err != nil { // a unary call too
		t.Fatal(err)
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if len(hc.accept) < 2 {
		t.Fatalf("recorded %d calls, want the session and a unary call", len(hc.accept))
	}
	for i := range hc.accept {
		if strings.Contains(hc.accept[i], "gzip") || strings.Contains(hc.got[i], "gzip") {
			t.Fatalf("call %d: Grpc-Accept-Encoding %q, Grpc-Encoding %q; want no gzip", i, hc.accept[i], hc.got[i])
		}
	}
}
