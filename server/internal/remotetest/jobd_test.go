package remotetest

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
)

// jobdProc is a running jobd process.
type jobdProc struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	log  strings.Builder
	done chan struct{}
}

func (p *jobdProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startJobd starts a jobd process with args on a free loopback port and
// waits until it listens.
func startJobd(t *testing.T, args ...string) *jobdProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "jobd"), args...)
	cmd.Env = append(os.Environ(), "JOBD_LISTEN=127.0.0.1:0", "JOBD_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &jobdProc{cmd: cmd, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.Write(sc.Bytes())
			p.log.WriteByte('\n')
			p.mu.Unlock()
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "jobd listening" {
				u, _ := rec["listen"].(string)
				listening <- u
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("jobd %v log:\n%s", args, p.logText())
		}
	})
	select {
	case p.url = <-listening:
	case <-p.done:
		t.Fatalf("jobd exited before listening:\n%s", p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("jobd did not listen within 30s:\n%s", p.logText())
	}
	return p
}

// TestKillJobd: two jobd on one Redis; the worker is connected to the
// first, which is SIGKILLed mid-run: the worker reconnects to the second
// and every task completes exactly once.
func TestKillJobd(t *testing.T) {
	addr := testserver.Redis(t)
	ns := "killjobd" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	args := []string{"--store", "redis", "--redis-addr", addr, "--namespace", ns}
	j1 := startJobd(t, args...)
	j2 := startJobd(t, args...)
	journal := filepath.Join(t.TempDir(), "journal")
	w := startWorker(t, j1.url+","+j2.url, "w", "-slots", "8", "-journal", journal, "-ns", ns)
	c := client(t, j2.url, "", ns)
	ids := enqueue(t, c, 200, task{kind: "sleep", args: "[20]", retries: 5})
	waitFor(t, 20*time.Second, "the worker runs some", func() bool { return len(readJournal(t, journal)) >= 40 })
	_ = j1.cmd.Process.Kill()
	<-j1.done
	done := waitDone(t, c, ids, time.Minute)
	h := history(t, c)
	for _, id := range ids {
		if done[id].State != store.Completed {
			t.Errorf("%s ended %v", id, done[id].State)
		}
		n := 0
		for _, r := range h[id] {
			if r.State == store.Completed {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s completed %d times, want once", id, n)
		}
	}
	if bad := overlaps(readJournal(t, journal)); len(bad) > 0 {
		t.Errorf("instances ran twice at once: %v", bad)
	}
	if !strings.Contains(w.logText(), "session to jobd up") || strings.Count(w.logText(), "session to jobd up") < 2 {
		t.Errorf("the worker did not open a second session:\n%s", w.logText())
	}
}

// TestNamespaceIsolation: a worker token for namespace a can neither
// receive nor see b's tasks; b's tasks wait, and GetInstance says why.
func TestNamespaceIsolation(t *testing.T) {
	tokens := []server.Token{
		{Name: "worker-a", SHA256: server.HashToken("secret-a"), Role: server.RoleWorker, Namespaces: []string{"a"}},
		{Name: "worker-b", SHA256: server.HashToken("secret-b"), Role: server.RoleWorker, Namespaces: []string{"b"}},
		{Name: "viewer", SHA256: server.HashToken("secret-v"), Role: server.RoleViewer, Namespaces: []string{"*"}},
	}
	js := startServer(t, tokens, "a", "b")
	ca := client(t, js.url, "secret-a", "a")
	cb := client(t, js.url, "secret-b", "b")
	// A worker token for a asking for b is refused, at once.
	_, err := remote.Dial(t.Context(), remote.Options{Address: js.url, Token: "secret-a", Namespace: "b", Logger: quiet})
	if !errors.Is(err, remote.ErrRefused) || !strings.Contains(err.Error(), "may not use namespace") {
		t.Fatalf("Dial with a's token into b: %v, want ErrRefused naming the namespace", err)
	}
	startWorker(t, js.url, "wa", "-token", "secret-a", "-ns", "a")
	aIDs := enqueue(t, ca, 50, task{kind: "noop"})
	bIDs := enqueue(t, cb, 50, task{kind: "noop"})
	waitDone(t, ca, aIDs, 30*time.Second)
	// a's worker sees none of b's instances.
	seen, err := ca.LookupInstances(t.Context(), &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range seen {
		for _, id := range bIDs {
			if in.ID == id {
				t.Fatalf("namespace a lists b's instance %s", id)
			}
		}
	}
	if got, _ := ca.LookupInstances(t.Context(), &store.Query{InstanceID: bIDs[0]}); len(got) != 0 {
		t.Fatalf("a's token looked up b's instance: %+v", got[0])
	}
	// b's wait: nobody runs noop in b.
	bs, err := cb.LookupInstances(t.Context(), &store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range bs {
		if in.State != store.Scheduled {
			t.Fatalf("b's instance %s is %v; no worker of b runs", in.ID, in.State)
		}
	}
	why := whyWaiting(t, js.url, "secret-v", "b", bIDs[0])
	if why.GetReason() != "no_node_for_kind" {
		t.Fatalf("GetInstance's waiting for b's task: %v, want no_node_for_kind", why)
	}
	// Once a worker of b connects, they run.
	startWorker(t, js.url, "wb", "-token", "secret-b", "-ns", "b")
	waitDone(t, cb, bIDs, 30*time.Second)
}

// whyWaiting asks JobService.GetInstance why the instance waits.
func whyWaiting(t *testing.T, url, token, ns, id string) *pb.WaitExplanation {
	t.Helper()
	c := jobkitv1connect.NewJobServiceClient(http.DefaultClient, url)
	req := connect.NewRequest(&pb.GetInstanceRequest{Id: id})
	req.Header().Set("Authorization", "Bearer "+token)
	req.Header().Set(server.NamespaceHeader, ns)
	res, err := c.GetInstance(t.Context(), req)
	if err != nil {
		t.Fatalf("GetInstance: %v", err)
	}
	if res.Msg.GetWaiting() == nil {
		t.Fatalf("GetInstance of a Scheduled instance says nothing of why it waits: %v", res.Msg)
	}
	return res.Msg.GetWaiting()
}
