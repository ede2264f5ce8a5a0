package server

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"testing"

	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store/memdbstore"
)

// TestExecutorGarbageFrame: a session whose first message is a gRPC frame
// of bytes that are no ConnectRequest ends with InvalidArgument (gRPC
// status 3) and a message saying so; jobd keeps serving other workers.
func TestExecutorGarbageFrame(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02}
	var body bytes.Buffer
	body.WriteByte(0) // not compressed
	_ = binary.Write(&body, binary.BigEndian, uint32(len(garbage)))
	body.Write(garbage)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/jobkit.v1.ExecutorService/Connect", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	res, err := httpClient(t, true, "", "").Do(req)
	if err != nil {
		t.Fatalf("POST a garbage frame: %v", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	status := res.Trailer.Get("Grpc-Status")
	if status == "" {
		status = res.Header.Get("Grpc-Status") // a trailers-only answer
	}
	msg := res.Trailer.Get("Grpc-Message") + res.Header.Get("Grpc-Message")
	if status != "3" {
		t.Fatalf("grpc-status %q (%s), want 3 (InvalidArgument)", status, msg)
	}
	t.Logf("garbage frame: grpc-status %s: %s", status, msg)
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, Logger: quiet})
	if err != nil {
		t.Fatalf("a worker after the garbage: %v", err)
	}
	rs.Close()
}
