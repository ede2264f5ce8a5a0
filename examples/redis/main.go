// Redis runs two processes that share one queue on a redis-server: this
// program starts a second copy of itself, both run a job.Manager on the
// same namespace, the first schedules jobs, and each job reports which
// process ran it. Every job runs once, on whichever process was free.
//
//	redis-server --port 6379 --save '' &       # or: apt-get install redis-server
//	cd examples/redis && go run .              # -addr host:port for another server
//
// (a module of its own: from the root, go run ./examples/redis works only
// in the workspace make work writes)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store/redisstore"
)

func main() {
	addr := flag.String("addr", envOr("JOBKIT_REDIS_ADDR", "127.0.0.1:6379"), "redis-server address")
	node := flag.String("node", "first", "this process's node name")
	ns := flag.String("ns", fmt.Sprintf("example_%d", time.Now().UnixNano()), "store namespace (shared by both processes)")
	jobs := flag.Int("jobs", 20, "jobs to schedule")
	flag.Parse()

	rdb := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	defer rdb.Close() // the store never closes the caller's client
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Fatalf("no redis-server at %s (%v): start one with `redis-server --port 6379 --save ''` (Debian: apt-get install redis-server) or pass -addr", *addr, err)
	}

	st, err := redisstore.New(rdb, redisstore.WithNamespace(*ns))
	if err != nil {
		log.Fatal(err)
	}
	mgr, err := job.NewManager(
		job.WithStore(st),
		job.WithNodeID(*node),
		job.WithWorkers(2),
	)
	if err != nil {
		log.Fatal(err)
	}
	square, err := job.NewJob(
		job.WithKind("square"),
		job.WithExecutor(func(ji job.Instance, n int) (string, error) {
			time.Sleep(50 * time.Millisecond) // some work, so both processes get a share
			return fmt.Sprintf("%d² = %d on %s", n, n*n, *node), nil
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(square); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}

	if *node != "first" {
		// The second process works until the first one stops it.
		sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
		<-sig.Done()
		if err := mgr.Stop(context.Background()); err != nil {
			log.Fatal(err)
		}
		return
	}

	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	second := exec.Command(self, "-addr", *addr, "-node", "second", "-ns", *ns)
	second.Stdout, second.Stderr = os.Stdout, os.Stderr
	if err := second.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() {
		second.Process.Signal(syscall.SIGTERM)
		second.Wait()
	}()
	time.Sleep(200 * time.Millisecond) // let the second process start up

	var ids []string
	for i := 1; i <= *jobs; i++ {
		ji, err := mgr.ScheduleJob(ctx, "square", job.WithArguments(i))
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, ji.ID)
	}
	perNode := map[string]int{}
	for _, id := range ids {
		for {
			ji, err := mgr.GetInstance(ctx, id)
			if err != nil {
				log.Fatal(err)
			}
			if ji.State.Final() {
				res := ji.Results()
				fmt.Println(ji.State, res)
				if len(res) == 1 {
					if s, ok := res[0].(string); ok {
						perNode[s[strings.LastIndexByte(s, ' ')+1:]]++
					}
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Printf("%d jobs: %d ran on first, %d on second\n", len(ids), perNode["first"], perNode["second"])
	if err := mgr.Stop(ctx); err != nil {
		log.Fatal(err)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
