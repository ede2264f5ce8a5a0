package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
)

// What one task costs, measured so that the machine's load does not change
// it much: CPU seconds of every process (this one, the workers, the
// redis-server), allocations, redis commands, jobd's store calls, and the
// messages and bytes of the workers' streams, each divided by the tasks.

// cpuTime returns the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// redisCost is what redis-server reports of its work so far.
type redisCost struct {
	cpu      time.Duration
	commands int64
}

func readRedisCost(ctx context.Context, rdb *redis.Client) redisCost {
	var c redisCost
	for _, section := range []string{"cpu", "stats"} {
		info, err := rdb.Info(ctx, section).Result()
		if err != nil {
			return c
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
			if !ok {
				continue
			}
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				c.cpu += time.Duration(f * float64(time.Second))
			case "total_commands_processed":
				c.commands, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return c
}

// counts are the calls jobd makes to its store for the workers.
type counts struct {
	claim, finish, renew, heartbeat atomic.Int64
}

// countingStore counts the calls a store.Store gets (jobd's, for its
// workers) and keeps the store's wake-ups (store.Notifier).
type countingStore struct {
	store.Store
	n *counts
}

func (c countingStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	c.n.claim.Add(1)
	return c.Store.Claim(ctx, p)
}

func (c countingStore) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	c.n.finish.Add(1)
	return c.Store.Finish(ctx, p)
}

func (c countingStore) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	c.n.renew.Add(1)
	return c.Store.Renew(ctx, p)
}

func (c countingStore) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	c.n.heartbeat.Add(1)
	return c.Store.Heartbeat(ctx, p)
}

func (c countingStore) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	return c.Store.(store.Notifier).Subscribe(ctx, queue)
}

// countingListener counts the bytes read from and written to its
// connections (jobd's: the workers' streams).
type countingListener struct {
	net.Listener
	in, out *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.in, l.out}, nil
}

type countingConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

// profile starts a CPU profile written to path+".cpu"; the function it
// returns stops it and writes the allocations to path+".allocs". A no-op
// for an empty path.
func profile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path + ".cpu")
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if a, err := os.Create(path + ".allocs"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			a.Close()
		}
	}
}
