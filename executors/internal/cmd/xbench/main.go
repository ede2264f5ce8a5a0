// Command xbench measures the built-in executor types for
// doc/benchmarks-appendix.md (issue 22): jobs per second through a Manager on the
// embedded store, and the cold start of a new Wasm module.
//
//	go run ./internal/cmd/xbench -type webhook -n 20000 -workers 64
//	go run ./internal/cmd/xbench -type command -n 2000
//	go run ./internal/cmd/xbench -type wasm -n 20000
//	go run ./internal/cmd/xbench -type wasm-go -n 500 -module greet.wasm
//	go run ./internal/cmd/xbench -type coldstart -module greet.wasm
//	go run ./internal/cmd/xbench -type go -n 20000   # the engine alone
//	go run ./internal/cmd/xbench -type plainhttp -n 20000   # HTTP alone
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/store"
	guard "github.com/jobkit/job/webhook"
)

// noopModule's _start returns at once.
var noopModule = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, 0x03, 0x02, 0x01, 0x00,
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00,
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b}

func main() {
	typ := flag.String("type", "webhook", "webhook, command, wasm (no-op module), wasm-go (-module, e.g. the greet example), coldstart, go (a Go function that does nothing: the engine's own cost), or plainhttp (the webhook's POSTs through plain net/http, no jobkit)")
	n := flag.Int("n", 10000, "jobs")
	workers := flag.Int("workers", 64, "workers")
	module := flag.String("module", "", "a Go-built module for wasm-go and coldstart")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile (every allocation sampled at 4 KiB) to this file after the run")
	flag.Parse()
	if *memprofile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memprofile)
			if err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "xbench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(*typ, *n, *workers, *module); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "xbench:", err)
		os.Exit(1)
	}
}

func run(typ string, n, workers int, module string) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "xbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	mods, err := wasm.NewDirModules(tmp, 0)
	if err != nil {
		return err
	}
	if typ == "coldstart" {
		return coldStart(ctx, mods, module)
	}
	if typ == "plainhttp" {
		return plainHTTP(n, workers)
	}
	var (
		et     job.ExecutorType
		config any
		args   []any
		conns  atomic.Int64 // connections the webhook server accepted
	)
	switch typ {
	case "go":
	case "webhook":
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		allow, _ := guard.ParseAllowlist("127.0.0.1")
		et = webhook.New(webhook.Options{Guard: &guard.Guard{Allow: allow}, Secrets: secrets.Map(map[string]string{"k": "bench-secret"})})
		config = map[string]any{"url": srv.URL + "/{{index .Args 0}}", "secret_ref": "k"}
		args = []any{"x"}
	case "command":
		et = command.New(command.Options{Allow: []string{"/bin/true"}})
		config = map[string]any{"argv": []string{"/bin/true"}}
	case "wasm", "wasm-go":
		b := noopModule
		if typ == "wasm-go" {
			if b, err = os.ReadFile(module); err != nil {
				return err
			}
			args = []any{"bench"}
		}
		ref, err := mods.Put(b)
		if err != nil {
			return err
		}
		wt, err := wasm.New(wasm.Options{Modules: mods})
		if err != nil {
			return err
		}
		defer wt.Close(ctx)
		if err := wt.Compile(ctx, ref, 0); err != nil { // cached: measure runs, not the compile
			return err
		}
		et, config = wt, map[string]any{"module": ref}
	default:
		return fmt.Errorf("-type %q", typ)
	}
	opts := []job.ManagerOption{job.WithWorkers(workers), job.WithRetention(0, 0)}
	if et != nil {
		opts = append(opts, job.WithExecutorTypes(et))
	}
	m, err := job.NewManager(opts...)
	if err != nil {
		return err
	}
	if et == nil {
		j, err := job.NewJob(job.WithKind("bench"), job.WithExecutor(func(context.Context) error { return nil }))
		if err != nil {
			return err
		}
		if err := m.RegisterJob(j); err != nil {
			return err
		}
	} else {
		raw, _ := json.Marshal(config)
		if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "bench", Executor: &store.ExecutorSpec{Type: et.Type(), Config: raw}}, 0); err != nil {
			return err
		}
	}
	items := make([]job.BatchItem, 0, 1000)
	for i := 0; i < n; i += len(items) {
		items = items[:0]
		for j := i; j < n && len(items) < 1000; j++ {
			items = append(items, job.BatchItem{Kind: "bench", Options: []job.ScheduleOption{job.WithArguments(args...)}})
		}
		if _, err := m.ScheduleJobs(ctx, items...); err != nil {
			return err
		}
	}
	cpu0 := cpuTime()
	start := time.Now()
	if err := m.Start(ctx); err != nil {
		return err
	}
	if err := m.Wait(ctx); err != nil {
		return err
	}
	took := time.Since(start)
	cpu := cpuTime() - cpu0
	counts, err := m.Admin().CountInstances(ctx, "", "bench")
	if err != nil {
		return err
	}
	var done int64
	for _, c := range counts {
		done += c.States[store.Completed]
	}
	_ = m.Stop(ctx)
	fmt.Printf("%s: %d jobs (%d completed), %d workers, %v: %.0f jobs/s; process CPU %v (%.1f µs a job)", typ, n, done, workers, took.Round(time.Millisecond), float64(n)/took.Seconds(), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n))
	if typ == "webhook" {
		fmt.Printf("; %d connections", conns.Load())
	}
	fmt.Println()
	if done != int64(n) {
		return fmt.Errorf("%d of %d completed", done, n)
	}
	return nil
}

// plainHTTP sends n signed-size POSTs from workers goroutines through a
// plain net/http client to the same no-op server as -type webhook, with
// no jobkit at all: the floor of HTTP itself in this process.
func plainHTTP(n, workers int) error {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	body := []byte(`{"id":"0192d7a0-0000-7000-8000-000000000000","kind":"bench","attempt":1,"args":["x"]}`)
	var next atomic.Int64
	errs := make(chan error, workers)
	cpu0 := cpuTime()
	start := time.Now()
	for range workers {
		go func() {
			for next.Add(1) <= int64(n) {
				resp, err := c.Post(srv.URL+"/x", "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			return err
		}
	}
	took, cpu := time.Since(start), cpuTime()-cpu0
	fmt.Printf("plainhttp: %d requests, %d goroutines, %v: %.0f requests/s; process CPU %v (%.1f µs a request); %d connections\n", n, workers, took.Round(time.Millisecond), float64(n)/took.Seconds(), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n), conns.Load())
	return nil
}

// cpuTime is the CPU the process used so far (user and system, its
// waited-for children included): a figure the machine's load changes far
// less than the wall clock.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// coldStart times the first compile of a module never seen, with the
// compiler and the interpreter, then a first and a cached run.
func coldStart(ctx context.Context, mods *wasm.DirModules, module string) error {
	for _, c := range []struct {
		name string
		b    func() ([]byte, error)
	}{
		{"no-op module", func() ([]byte, error) { return noopModule, nil }},
		{module, func() ([]byte, error) { return os.ReadFile(module) }},
	} {
		if c.name == "" {
			continue
		}
		b, err := c.b()
		if err != nil {
			return err
		}
		ref, err := mods.Put(b)
		if err != nil {
			return err
		}
		for _, interp := range []bool{false, true} {
			wt, err := wasm.New(wasm.Options{Modules: mods, Interpreter: interp})
			if err != nil {
				return err
			}
			start := time.Now()
			if err := wt.Compile(ctx, ref, 0); err != nil {
				return err
			}
			compile := time.Since(start)
			start = time.Now()
			if err := wt.Compile(ctx, ref, 0); err != nil {
				return err
			}
			cached := time.Since(start)
			engine := "compiler"
			if interp {
				engine = "interpreter"
			}
			fmt.Printf("coldstart %s (%d bytes, %s): compile %v, cached lookup %v\n", c.name, len(b), engine, compile.Round(time.Microsecond), cached.Round(time.Microsecond))
			_ = wt.Close(ctx)
		}
	}
	return nil
}
