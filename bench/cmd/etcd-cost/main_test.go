package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jobkit/job/internal/testserver"
)

func TestWithEndpoint(t *testing.T) {
	got := withEndpoint([]string{"bench", "-etcd", "{etcd}", "-x=a{etcd}b", "-y"}, "127.0.0.1:1,127.0.0.1:2")
	want := []string{"bench", "-etcd", "127.0.0.1:1,127.0.0.1:2", "-x=a127.0.0.1:1,127.0.0.1:2b", "-y"}
	if !slices.Equal(got, want) {
		t.Fatalf("withEndpoint = %q, want %q", got, want)
	}
}

// TestProfile takes a CPU profile of an etcd started with --enable-pprof,
// and names the flag when the etcd was started without it.
func TestProfile(t *testing.T) {
	dir := t.TempDir()
	with := testserver.StartEtcd(t, "--enable-pprof")
	defer with.Stop()
	file := filepath.Join(dir, "etcd.prof")
	if err := profile("http://"+with.Addr, file, 1); err != nil {
		t.Fatalf("profile of an etcd with --enable-pprof: %v", err)
	}
	b, err := os.ReadFile(file)
	if err != nil || len(b) == 0 {
		t.Fatalf("profile file: %d bytes, %v; want a profile", len(b), err)
	}

	without := testserver.StartEtcd(t)
	defer without.Stop()
	err = profile("http://"+without.Addr, filepath.Join(dir, "none.prof"), 1)
	if err == nil || !strings.Contains(err.Error(), "--enable-pprof") {
		t.Fatalf("profile of an etcd without --enable-pprof: %v; want an error naming --enable-pprof", err)
	}
}
