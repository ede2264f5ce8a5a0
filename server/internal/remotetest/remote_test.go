// Package remotetest holds the real-process tests of remote executors
// (issue 21): worker processes (./worker, an ordinary job.Manager on a
// remote.Store) connected over TCP to a jobd server.
package remotetest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// binDir holds the binaries TestMain builds.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "remotetest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		for _, b := range []struct{ out, pkg string }{
			{"worker", "./worker"},
			{"jobd", "../../cmd/jobd"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "go build %s: %v\n", b.pkg, err)
				return 1
			}
		}
		defer testserver.StopAll()
		return m.Run()
	}()
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// jobdServer is a jobd API server in the test process, on a memdb store,
// listening on a real loopback port.
type jobdServer struct {
	srv *server.Server
	url string
	st  *memdbstore.Store
}

// startServer serves namespaces (the first is the default) on one memdb
// store per namespace, with tokens when given.
func startServer(t *testing.T, tokens []server.Token, namespaces ...string) *jobdServer {
	t.Helper()
	if len(namespaces) == 0 {
		namespaces = []string{"default"}
	}
	mgrs := map[string]*job.Manager{}
	stores := map[string]store.Store{}
	var first *memdbstore.Store
	for _, ns := range namespaces {
		st, err := memdbstore.New()
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = st
		}
		m, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
		if err != nil {
			t.Fatal(err)
		}
		mgrs[ns], stores[ns] = m, st
	}
	srv, err := server.New(server.Config{Namespaces: mgrs, DefaultNamespace: namespaces[0], Tokens: tokens, ExecutorStores: stores, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.Protocols = server.Protocols()
	hs.Start()
	t.Cleanup(hs.Close)
	return &jobdServer{srv: srv, url: hs.URL, st: first}
}

// worker is a running worker process.
type worker struct {
	t    *testing.T
	node string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
	// readyCh is closed when the worker printed "ready".
	readyCh chan struct{}
}

func (w *worker) logText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.String()
}

// startWorker starts a worker process connected to addr and waits until
// its manager runs.
func startWorker(t *testing.T, addr, node string, args ...string) *worker {
	t.Helper()
	w := startWorkerNoWait(t, addr, node, args...)
	w.waitReady()
	return w
}

func startWorkerNoWait(t *testing.T, addr, node string, args ...string) *worker {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "worker"), append([]string{"-addr", addr, "-node", node}, args...)...)
	w := &worker{t: t, node: node, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &w.mu, w: &w.log}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				close(ready)
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	w.readyCh = ready
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			t.Logf("worker %s log:\n%s", node, w.logText())
		}
	})
	return w
}

func (w *worker) waitReady() {
	w.t.Helper()
	select {
	case <-w.readyCh:
	case <-w.done:
		w.t.Fatalf("worker %s exited before it was ready:\n%s", w.node, w.logText())
	case <-time.After(30 * time.Second):
		w.t.Fatalf("worker %s not ready within 30s:\n%s", w.node, w.logText())
	}
}

// stop ends the worker with SIGTERM and waits for it.
func (w *worker) stop() {
	w.t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		w.t.Fatalf("worker %s did not stop within 20s", w.node)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// client returns a remote.Store for the test itself: enqueue and look up.
func client(t *testing.T, addr, token, ns string) *remote.Store {
	t.Helper()
	c, err := remote.Dial(t.Context(), remote.Options{Address: addr, Token: token, Namespace: ns, NoPush: true, Logger: quiet})
	if err != nil {
		t.Fatalf("remote.Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// task describes instances to enqueue.
type task struct {
	kind    string
	args    string // JSON array
	labels  []string
	retries int
}

// enqueue stores n instances of tk and returns their IDs.
func enqueue(t *testing.T, s store.Store, n int, tk task) []string {
	t.Helper()
	now := time.Now()
	var ins []*store.Instance
	var ids []string
	for range n {
		id := uuid.NewString()
		args := tk.args
		if args == "" {
			args = "[]"
		}
		ins = append(ins, &store.Instance{ID: id, Kind: tk.kind, Queue: "default", Args: []byte(args), RunAt: now, CreatedAt: now,
			MaxRetries: tk.retries, Labels: store.NormLabels(tk.labels)})
		ids = append(ids, id)
	}
	for len(ins) > 0 {
		b := ins[:min(len(ins), 200)]
		ins = ins[len(b):]
		rs, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: b, Now: now, Node: "test"})
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		for _, r := range rs {
			if r.Err != nil {
				t.Fatalf("Enqueue: %v", r.Err)
			}
		}
	}
	return ids
}

// waitDone waits until every instance in ids is in a final state and
// returns them by ID.
func waitDone(t *testing.T, s store.Store, ids []string, within time.Duration) map[string]*store.Instance {
	t.Helper()
	deadline := time.Now().Add(within)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for {
		all, err := s.LookupInstances(t.Context(), &store.Query{})
		if err != nil {
			t.Fatalf("LookupInstances: %v", err)
		}
		got := map[string]*store.Instance{}
		pending := 0
		for _, in := range all {
			if want[in.ID] {
				got[in.ID] = in
				if !in.State.Final() {
					pending++
				}
			}
		}
		if len(got) == len(want) && pending == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d instances not finished within %v", pending+len(want)-len(got), len(want), within)
		}
		time.Sleep(20 * time.Millisecond) // polling the store for a condition, with a deadline
	}
}

// history returns the history records of every instance, by ID.
func history(t *testing.T, s store.Store) map[string][]*store.HistoryRecord {
	t.Helper()
	recs, err := s.LookupHistory(t.Context(), &store.Query{})
	if err != nil {
		t.Fatalf("LookupHistory: %v", err)
	}
	out := map[string][]*store.HistoryRecord{}
	for _, r := range recs {
		out[r.InstanceID] = append(out[r.InstanceID], r)
	}
	return out
}

// TestLabelRouting: a task that requires the label gpu runs only on the
// gpu worker, across 1,000 tasks, while both workers share the rest.
func TestLabelRouting(t *testing.T) {
	js := startServer(t, nil)
	startWorker(t, js.url, "gpu-1", "-labels", "gpu", "-slots", "8")
	startWorker(t, js.url, "cpu-1", "-slots", "8")
	c := client(t, js.url, "", "")
	gpu := enqueue(t, c, 500, task{kind: "noop", labels: []string{"gpu"}})
	anyw := enqueue(t, c, 500, task{kind: "noop"})
	waitDone(t, c, append(slices.Clone(gpu), anyw...), time.Minute)
	hist := history(t, c)
	ranOn := map[string]int{}
	for _, id := range gpu {
		for _, r := range hist[id] {
			if r.State == store.Processing && r.Node != "gpu-1" {
				t.Fatalf("gpu task %s ran on %s", id, r.Node)
			}
		}
	}
	for _, id := range anyw {
		for _, r := range hist[id] {
			if r.State == store.Completed {
				ranOn[r.Node]++
			}
		}
	}
	t.Logf("tasks without labels completed by: %v", ranOn)
	if ranOn["cpu-1"] == 0 {
		t.Errorf("the cpu worker ran none of the 500 unlabelled tasks: %v", ranOn)
	}
}

// TestFlowControl: a worker with 4 slots never has more than 4 attempts in
// flight, as jobd counts them (claimed or pushed, not finished).
func TestFlowControl(t *testing.T) {
	js := startServer(t, nil)
	w := startWorker(t, js.url, "w4", "-slots", "4")
	c := client(t, js.url, "", "")
	ids := enqueue(t, c, 200, task{kind: "sleep", args: "[10]"})
	waitDone(t, c, ids, time.Minute)
	var peak int
	for _, s := range js.srv.Sessions() {
		if s.Node == "w4" {
			peak = s.PeakInFlight
		}
	}
	if peak > 4 {
		t.Fatalf("jobd had %d attempts of the 4-slot worker in flight at once", peak)
	}
	if peak < 4 {
		t.Errorf("peak in flight %d: the worker never used its 4 slots (the test proves nothing)", peak)
	}
	w.stop()
}

// TestKillWorker: SIGKILL a worker mid-run; its attempts run again on the
// other worker within 2 s of the kill, and every task completes exactly
// once as the store records it.
func TestKillWorker(t *testing.T) {
	js := startServer(t, nil)
	a := startWorker(t, js.url, "a", "-slots", "4")
	c := client(t, js.url, "", "")
	ids := enqueue(t, c, 4, task{kind: "sleep", args: "[60000]", retries: 3})
	// Wait until a runs all four, then start b and kill a.
	waitFor(t, 10*time.Second, "a runs the four tasks", func() bool {
		ins, _ := c.LookupInstances(t.Context(), &store.Query{States: []store.State{store.Processing}})
		return len(ins) == 4
	})
	startWorker(t, js.url, "b", "-slots", "4")
	short := enqueue(t, c, 20, task{kind: "noop"})
	killed := time.Now()
	_ = a.cmd.Process.Kill()
	<-a.done
	var rerun []time.Duration
	waitFor(t, 10*time.Second, "b runs a's tasks", func() bool {
		h := history(t, c)
		rerun = rerun[:0]
		for _, id := range ids {
			for _, r := range h[id] {
				if r.State == store.Processing && r.Node == "b" {
					rerun = append(rerun, r.Time.Sub(killed))
				}
			}
		}
		return len(rerun) == 4
	})
	for _, d := range rerun {
		if d > 2*time.Second {
			t.Errorf("a task of the killed worker ran again %v after the kill, want within 2s", d)
		}
	}
	t.Logf("re-run after the kill: %v", rerun)
	// Cancel the long ones; the short ones complete once each.
	for _, id := range ids {
		if _, err := c.Cancel(t.Context(), &store.CancelParams{ID: id, Now: time.Now(), Node: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	waitDone(t, c, append(slices.Clone(ids), short...), 30*time.Second)
	h := history(t, c)
	for _, id := range short {
		n := 0
		for _, r := range h[id] {
			if r.State == store.Completed {
				n++
			}
		}
		if n != 1 {
			t.Errorf("task %s completed %d times, want once", id, n)
		}
	}
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling for a condition, with a deadline
	}
}

// proxy forwards TCP connections to target until cut; while cut it
// refuses new connections.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "http://")}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if cut {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

// setCut cuts every connection (and refuses new ones) or lets them again.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// journalEntry is one line of a worker's journal.
type journalEntry struct {
	at      time.Time
	what    string
	id      string
	attempt int
	node    string
}

func readJournal(t *testing.T, path string) []journalEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []journalEntry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var e journalEntry
		var ns int64
		if _, err := fmt.Sscanf(line, "%d %s %s %d %s", &ns, &e.what, &e.id, &e.attempt, &e.node); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		e.at = time.Unix(0, ns)
		out = append(out, e)
	}
	return out
}

// overlaps returns the instances two of whose attempts ran at the same
// time on different nodes, by the journal.
func overlaps(entries []journalEntry) []string {
	type span struct {
		from, to time.Time
		node     string
	}
	open := map[string]map[string]time.Time{} // id → node → start
	spans := map[string][]span{}
	for _, e := range entries {
		if open[e.id] == nil {
			open[e.id] = map[string]time.Time{}
		}
		switch e.what {
		case "start":
			open[e.id][e.node] = e.at
		case "end":
			spans[e.id] = append(spans[e.id], span{open[e.id][e.node], e.at, e.node})
			delete(open[e.id], e.node)
		}
	}
	far := time.Now().Add(time.Hour)
	for id, m := range open {
		for node, from := range m {
			spans[id] = append(spans[id], span{from, far, node})
		}
	}
	var bad []string
	for id, ss := range spans {
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				if ss[i].node != ss[j].node && ss[i].from.Before(ss[j].to) && ss[j].from.Before(ss[i].to) {
					bad = append(bad, id)
				}
			}
		}
	}
	return bad
}

// TestCutConnection cuts a worker's connection to jobd without killing
// it. Cut briefly (within the fence window), the worker reconnects and
// its attempts go on (resumed, not run again); cut for longer, its engine
// fences (cancels its attempts) and the other worker runs them. Either
// way no instance runs on two workers at once.
func TestCutConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cutFor time.Duration
		resume bool
		// deadAfter is both workers' dead threshold: the fence window
		// is half of it, counted from the last heartbeat that got
		// through, and heartbeats go every quarter of it. With 1 s, a
		// 200 ms cut right before a heartbeat was due left the worker
		// 50 ms to reconnect and heartbeat before it fenced (under -race
		// on a loaded machine it did, and ran the tasks again); with
		// 4 s it has at least 800 ms.
		deadAfter time.Duration
	}{
		{"resume", 200 * time.Millisecond, true, 4 * time.Second},
		{"fenced", 3 * time.Second, false, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := startServer(t, nil)
			journal := filepath.Join(t.TempDir(), "journal")
			px := startProxy(t, js.url)
			// Reconnections at most 50 ms apart, so that a worker back
			// from a short cut is back within its fence window (with
			// the default, up to 2 s, it was up to chance).
			dead := "-dead-after=" + tc.deadAfter.String()
			a := startWorker(t, px.url(), "a", "-slots", "4", "-journal", journal, "-max-backoff", "50ms", dead)
			c := client(t, js.url, "", "")
			ids := enqueue(t, c, 4, task{kind: "sleep", args: "[2500]", retries: 3})
			waitFor(t, 10*time.Second, "a runs the four tasks", func() bool {
				return len(readJournal(t, journal)) == 4
			})
			startWorker(t, js.url, "b", "-slots", "4", "-journal", journal, dead)
			px.setCut(true)
			time.Sleep(tc.cutFor) // the length of the cut is what the test is about
			px.setCut(false)
			done := waitDone(t, c, ids, 30*time.Second)
			entries := readJournal(t, journal)
			if bad := overlaps(entries); len(bad) > 0 {
				t.Fatalf("instances ran on two workers at once: %v\njournal: %+v", bad, entries)
			}
			h := history(t, c)
			for _, id := range ids {
				if done[id].State != store.Completed {
					t.Errorf("%s ended %v, want completed", id, done[id].State)
				}
				var nodes []string
				for _, r := range h[id] {
					if r.State == store.Processing {
						nodes = append(nodes, r.Node)
					}
				}
				if tc.resume && (done[id].Attempt != 1 || !slices.Equal(nodes, []string{"a"})) {
					t.Errorf("%s: attempts %d on %v, want one attempt on a (resumed)\nworker a:\n%s", id, done[id].Attempt, nodes, a.logText())
				}
				if !tc.resume && !slices.Contains(nodes, "b") {
					t.Errorf("%s ran on %v after a long cut, want b to take it over", id, nodes)
				}
			}
		})
	}
}
