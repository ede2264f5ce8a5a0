package remotetest

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
)

// TestCancelPushed: two jobd processes on one Redis; a worker process
// connected to the first runs a task blocked in its function (its lease
// renewed every 10 s, the default); the task is canceled through the API
// of the second jobd. The first jobd learns of it from the store's cancel
// notices and pushes a cancel on the worker's stream: the function's
// context is done within 1 s, not at the next renewal, and the instance
// ends Canceled, once.
func TestCancelPushed(t *testing.T) {
	addr := testserver.Redis(t)
	ns := "cancelpush" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	args := []string{"--store", "redis", "--redis-addr", addr, "--namespace", ns}
	j1 := startJobd(t, args...)
	j2 := startJobd(t, args...)
	journal := filepath.Join(t.TempDir(), "journal")
	startWorker(t, j1.url, "w-cancel", "-slots", "2", "-journal", journal, "-ns", ns)
	c := client(t, j2.url, "", ns)
	ids := enqueue(t, c, 1, task{kind: "sleep", args: "[600000]", retries: 3})
	id := ids[0]
	waitFor(t, 20*time.Second, "the worker starts the task", func() bool { return len(readJournal(t, journal)) >= 1 })

	api := jobkitv1connect.NewJobServiceClient(http.DefaultClient, j2.url)
	req := connect.NewRequest(&pb.CancelInstanceRequest{Id: id})
	req.Header().Set(server.NamespaceHeader, ns)
	asked := time.Now()
	if _, err := api.CancelInstance(t.Context(), req); err != nil {
		t.Fatalf("CancelInstance through the second jobd: %v", err)
	}
	var ended time.Time
	waitFor(t, 15*time.Second, "the function returns", func() bool {
		for _, e := range readJournal(t, journal) {
			if e.what == "end" && e.id == id {
				ended = e.at
				return true
			}
		}
		return false
	})
	took := ended.Sub(asked)
	t.Logf("the function's context was done %v after the cancel was asked", took)
	if took > time.Second {
		t.Errorf("the function's context was done %v after the cancel; want within 1s (pushed, not at the next renewal)", took)
	}
	done := waitDone(t, c, ids, 15*time.Second)
	if done[id].State != store.Canceled {
		t.Fatalf("the task ended %v, want Canceled", done[id].State)
	}
	n := 0
	for _, r := range history(t, c)[id] {
		if r.State == store.Canceled {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d Canceled records, want one", n)
	}
	if starts := len(readJournal(t, journal)); starts != 2 {
		t.Fatalf("journal has %d entries, want one start and one end (no second attempt)", starts)
	}
}
