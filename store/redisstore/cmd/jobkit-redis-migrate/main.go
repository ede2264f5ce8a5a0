// Command jobkit-redis-migrate moves a namespace of a single Redis (or
// Valkey) server into a partitioned namespace, typically on a Redis
// Cluster: its definitions, documents (triggers, calendars, limits) and
// every Scheduled instance, with their IDs. It is safe to run again after
// a crash or a cancel midway: see redisstore.Migrate and the steps in
// doc/redis-cluster.md ("Moving from one Redis to a cluster").
//
//	jobkit-redis-migrate -from 10.0.0.5:6379 -ns orders \
//	    -to 10.0.1.1:7000,10.0.1.2:7000,10.0.1.3:7000 -partitions 16
//
// It refuses to run while the source has live nodes (stop its managers
// first). It exits 0 when everything was moved, 2 when instances are
// left in the source (still running, or skipped: the report says why; run
// it again later), and 1 on an error (run it again).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store/redisstore"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jobkit-redis-migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the source redis-server `host:port` (a single node)")
	ns := fs.String("ns", "default", "the source `namespace`")
	to := fs.String("to", "", "the target's `addresses`, comma-separated (a cluster's nodes, or one server)")
	toNS := fs.String("to-ns", "", "the target `namespace` (the source's when empty)")
	cluster := fs.Bool("cluster", false, "the target is a Redis Cluster (implied by more than one -to address)")
	partitions := fs.Int("partitions", 16, "the target namespace's partition `count` (fixed at its creation)")
	deadAfter := fs.Duration("dead-after", 10*time.Second, "a node not heard from for this long is not live (the managers' WithDeadAfter, if longer)")
	liveTarget := fs.Bool("live-target", false, "run while the target has live nodes (see doc/redis-cluster.md for what an interrupted run then risks)")
	collections := fs.String("collections", "", "document `collections` to copy, comma-separated (all the source holds when empty)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if *from == "" || *to == "" {
		fmt.Fprintln(stderr, "jobkit-redis-migrate: -from and -to are required: -from host:port -to host:port[,host:port...]")
		return 1
	}
	if *toNS == "" {
		*toNS = *ns
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	srcClient := redis.NewClient(&redis.Options{Addr: *from, ContextTimeoutEnabled: true})
	defer srcClient.Close()
	var dstClient redis.UniversalClient
	addrs := strings.Split(*to, ",")
	if *cluster || len(addrs) > 1 {
		dstClient = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	} else {
		dstClient = redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	}
	defer dstClient.Close()

	// One partition is exactly New's layout, and NewPartitioned refuses
	// a source that is partitioned already (naming its count).
	src, err := redisstore.NewPartitioned(ctx, srcClient, 1, redisstore.WithNamespace(*ns))
	if err != nil {
		fmt.Fprintf(stderr, "jobkit-redis-migrate: open the source: %v\n", err)
		return 1
	}
	if *from == *to && *ns == *toNS {
		fmt.Fprintln(stderr, "jobkit-redis-migrate: the source and the target are the same namespace; give -to-ns or another -to")
		return 1
	}
	dst, err := redisstore.NewPartitioned(ctx, dstClient, *partitions, redisstore.WithNamespace(*toNS))
	if err != nil {
		fmt.Fprintf(stderr, "jobkit-redis-migrate: open the target: %v\n", err)
		return 1
	}
	colls, err := sourceCollections(ctx, srcClient, *ns, *collections)
	if err != nil {
		fmt.Fprintf(stderr, "jobkit-redis-migrate: find the source's document collections: %v\n", err)
		return 1
	}
	rep, err := redisstore.Migrate(ctx, src, dst, redisstore.MigrateOptions{Collections: colls, DeadAfter: *deadAfter, LiveTarget: *liveTarget})
	if rep != nil {
		fmt.Fprintf(stdout, "definitions created: %d\ndocuments created: %d (already in the target: %d; collections %s)\nrescued in the source: %d\nmoved: %d (in the target already: %d)\n",
			rep.Definitions, rep.Documents, rep.DocumentsExisting, strings.Join(colls, ", "), rep.Rescued, rep.Moved, rep.InTargetAlready)
	}
	if err != nil {
		fmt.Fprintf(stderr, "jobkit-redis-migrate: %v\n", err)
		return 1
	}
	var until time.Time
	for _, in := range rep.Processing {
		fmt.Fprintf(stdout, "still running in the source: %s (%s, lease until %s)\n", in.ID, in.Kind, in.LeaseUntil.Format(time.RFC3339))
		if in.LeaseUntil.After(until) {
			until = in.LeaseUntil
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(stdout, "left in the source: %s: %s\n", s.ID, s.Reason)
	}
	if !rep.Done() {
		if !until.IsZero() {
			fmt.Fprintf(stdout, "run again after %s, when the running instances' leases have lapsed\n", until.Format(time.RFC3339))
		}
		return 2
	}
	fmt.Fprintln(stdout, "done: nothing left to move")
	return 0
}

// sourceCollections returns the collections named in list, or else
// those the source namespace holds documents in (its keys
// "jobkit:{ns}:doc:<collection>").
func sourceCollections(ctx context.Context, c *redis.Client, ns, list string) ([]string, error) {
	if list != "" {
		return strings.Split(list, ","), nil
	}
	prefix := "jobkit:{" + ns + "}:doc:"
	var out []string
	it := c.Scan(ctx, 0, strings.ReplaceAll(prefix, "[", `\[`)+"*", 1000).Iterator()
	for it.Next(ctx) {
		out = append(out, strings.TrimPrefix(it.Val(), prefix))
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
