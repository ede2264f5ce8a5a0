package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
)

// TestExecutorsList runs jobctl executors list against a real server
// whose store two nodes share: one enabling the webhook and command
// types, one enabling none.
func TestExecutorsList(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) {
		st := sk.open(t, "default")
		start := func(id string, opts ...job.ManagerOption) *job.Manager {
			m, err := job.NewManager(append([]job.ManagerOption{job.WithStore(st), job.WithNodeID(id), job.WithWorkers(2)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			if err := m.Start(ctx); err != nil {
				cancel()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				defer cancel()
				sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer scancel()
				_ = m.Stop(sctx)
			})
			return m
		}
		typed := start("typed", job.WithExecutorTypes(webhook.New(webhook.Options{}), command.New(command.Options{Allow: []string{"/bin/true"}})))
		start("plain")
		srv, err := server.New(server.Config{Namespaces: map[string]*job.Manager{"default": typed}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewUnstartedServer(srv)
		hs.Config.Protocols = server.Protocols()
		hs.Start()
		t.Cleanup(hs.Close)
		s := &testServer{url: hs.URL, mgr: typed}

		waitFor(t, "both nodes in the registry", func() bool {
			ns, err := typed.Admin().ListNodes(t.Context())
			return err == nil && len(ns) == 2 && ns[0].Status == store.NodeLive && ns[1].Status == store.NodeLive
		})
		var all jobkitv1.ListNodesResponse
		s.okJSON(t, &all, "executors", "list")
		got := map[string][]string{}
		for _, n := range all.GetNodes() {
			got[n.GetId()] = n.GetExecutorTypes()
		}
		if len(got) != 2 || !slices.Equal(got["typed"], []string{"command", "webhook"}) || len(got["plain"]) != 0 {
			t.Fatalf("executors list -o json: %v; want typed [command webhook] and plain with none", got)
		}
		r := s.jobctl(t, "executors", "list")
		if r.code != 0 {
			t.Fatalf("executors list: exit %d: %s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], "EXECUTOR TYPES") ||
			!strings.HasPrefix(lines[1], "plain ") || !strings.HasSuffix(lines[1], " -") ||
			!strings.HasPrefix(lines[2], "typed ") || !strings.HasSuffix(lines[2], " command,webhook") || r.stderr != "" {
			t.Fatalf("executors list:\n%s\nstderr: %s", r.stdout, r.stderr)
		}
		var cmd jobkitv1.ListNodesResponse
		s.okJSON(t, &cmd, "executors", "list", "--type", "command")
		if len(cmd.GetNodes()) != 1 || cmd.GetNodes()[0].GetId() != "typed" {
			t.Fatalf("executors list --type command: %v, want typed alone", cmd.GetNodes())
		}
		r = s.jobctl(t, "executors", "list", "--type", "wasm")
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stderr, `No live node enables executor type "wasm": start jobd with`) {
			t.Fatalf("executors list --type wasm: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	})
}
