package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// ErrLiveNodes: Migrate found a live node in a namespace it must not
// move instances out of (or into) while it runs. Stop the managers of
// that namespace (their workers and schedulers), wait for them to leave,
// and run the migration again.
var ErrLiveNodes = errors.New("redisstore: live nodes in the namespace")

// MigrateOptions tunes Migrate. The zero value migrates with the
// defaults below.
type MigrateOptions struct {
	// Collections are the document collections copied (the triggers,
	// calendars, limits and other documents of the namespace). A store
	// cannot list its collections; cmd/jobkit-redis-migrate finds them in
	// the source's keys.
	Collections []string
	// DeadAfter: a node not heard from for longer is not live (10 s when
	// zero). Use the managers' WithDeadAfter when it is longer.
	DeadAfter time.Duration
	// LiveTarget lets the migration run while the target has live nodes
	// (its workers claim what was moved at once). Off by default: see
	// Migrate for what a crash then risks.
	LiveTarget bool
	// Batch is how many instances are moved per round (100 when zero).
	Batch int
	// Node names the migration in history records ("jobkit-redis-migrate"
	// when empty).
	Node string
}

// MigrateReport says what Migrate did.
type MigrateReport struct {
	// Moved is how many Scheduled instances are now in the target and no
	// longer in the source; of those, InTargetAlready were there from an
	// earlier, interrupted run.
	Moved, InTargetAlready int
	// Rescued is how many Processing instances of dead nodes or with
	// lapsed leases the source sent back to Scheduled (and were then
	// moved).
	Rescued int
	// Processing are the instances left running in the source: their
	// leases have not lapsed. Wait for them (until the latest LeaseUntil)
	// and run the migration again.
	Processing []*store.Instance
	// Skipped are the Scheduled instances left in the source, with why:
	// workflow tasks and shards (finish them before migrating), and
	// instances whose unique key another instance of the target holds.
	Skipped []MigrateSkip
	// Definitions and Documents are how many were created in the target;
	// DocumentsExisting how many were there already (an earlier run, or
	// written in the target) and were left as they are.
	Definitions, Documents, DocumentsExisting int
}

// MigrateSkip is a Scheduled instance Migrate left in the source.
type MigrateSkip struct {
	ID     string
	Reason string
}

// Done reports whether nothing is left to move: no running instance, no
// skipped one.
func (r *MigrateReport) Done() bool { return len(r.Processing) == 0 && len(r.Skipped) == 0 }

// Migrate moves a namespace's waiting work from src (a single-node
// namespace, from New) into dst (typically a partitioned namespace on a
// Redis Cluster, from NewPartitioned): its definitions, the documents of
// o.Collections (triggers among them), and every Scheduled instance with
// its ID, kind, queue, arguments, RunAt, priority, timeout, unique key
// (and its expiry), labels, metadata, limit key and CreatedAt. Its
// attempts so far are kept as the retries left: it starts at attempt 0 in
// dst with MaxRetries lowered by the attempts it used (an Enqueue cannot
// store an attempt count; the last attempt's Error is not kept). History and
// logs are not copied: an instance starts its history anew in dst
// (Created and Scheduled at the migration's time). Final instances stay
// in src.
//
// It refuses (ErrLiveNodes) to run while src has a live node, and while
// dst has one unless o.LiveTarget: the managers of the source must be
// stopped, so that no instance can be claimed in src while it is being
// moved. Each instance is enqueued in dst with its own ID, and only then
// deleted from src; an instance found in dst already (an earlier run
// stopped between the two) counts as moved. So a migration stopped
// anywhere (a crash, a cancel) leaves each instance in src, in dst or in
// both, never in neither, and running Migrate again finishes it. While an
// instance is in both, it can run only in dst (src has no workers), and
// the rerun deletes it from src: repeat an interrupted migration before
// starting src's managers again. With o.LiveTarget an interrupted run must
// be repeated before dst's retention could prune an instance it moved
// and then finished (a rerun would enqueue it again).
//
// Processing instances of nodes that stopped without leaving (stale) or
// whose lease lapsed are rescued in src first (as a manager's rescuer
// would) and moved; those still leased are left and reported.
func Migrate(ctx context.Context, src, dst store.Store, o MigrateOptions) (*MigrateReport, error) {
	if o.DeadAfter == 0 {
		o.DeadAfter = 10 * time.Second
	}
	if o.Batch == 0 {
		o.Batch = 100
	}
	if o.Node == "" {
		o.Node = "jobkit-redis-migrate"
	}
	if o.DeadAfter < 0 || o.Batch < 0 {
		return nil, fmt.Errorf("%w: migrate with DeadAfter %v and Batch %d; want them > 0 (or 0 for the defaults)", store.ErrInvalid, o.DeadAfter, o.Batch)
	}
	if err := refuseLive(ctx, src, "source", o.DeadAfter); err != nil {
		return nil, err
	}
	if !o.LiveTarget {
		if err := refuseLive(ctx, dst, "target", o.DeadAfter); err != nil {
			return nil, err
		}
	}
	r := &MigrateReport{}
	if err := migrateDefinitions(ctx, src, dst, r); err != nil {
		return r, err
	}
	if err := migrateDocuments(ctx, src, dst, o.Collections, r); err != nil {
		return r, err
	}
	if err := rescueSource(ctx, src, o, r); err != nil {
		return r, err
	}
	if err := migrateScheduled(ctx, src, dst, o, r); err != nil {
		return r, err
	}
	left, err := src.LookupInstances(ctx, &store.Query{States: []store.State{store.Processing}})
	if err != nil {
		return r, fmt.Errorf("migrate: look up running instances: %w", err)
	}
	r.Processing = left
	return r, nil
}

// refuseLive returns ErrLiveNodes when st lists a live node.
func refuseLive(ctx context.Context, st store.Store, which string, deadAfter time.Duration) error {
	nodes, err := st.ListNodes(ctx, &store.ListNodesParams{Now: time.Now(), DeadAfter: deadAfter})
	if err != nil {
		return fmt.Errorf("migrate: list the %s's nodes: %w", which, err)
	}
	var live []string
	for _, n := range nodes {
		if n.Status == store.NodeLive {
			live = append(live, n.ID)
		}
	}
	if len(live) > 0 {
		return fmt.Errorf("%w: the %s has %d live node(s) (%s); stop its managers and run the migration again", ErrLiveNodes, which, len(live), strings.Join(live, ", "))
	}
	return nil
}

// migrateDefinitions creates in dst each definition of src it lacks.
func migrateDefinitions(ctx context.Context, src, dst store.Store, r *MigrateReport) error {
	after := ""
	for {
		defs, err := src.ListDefinitions(ctx, &store.ListDefinitionsParams{After: after, Limit: store.MaxDefinitionsPage})
		if err != nil {
			return fmt.Errorf("migrate: list definitions: %w", err)
		}
		for _, d := range defs {
			c := *d
			_, err := dst.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &c, IfVersion: 0, Now: time.Now()})
			switch {
			case err == nil:
				r.Definitions++
			case errors.Is(err, store.ErrConflict):
			default:
				return fmt.Errorf("migrate: definition %q: %w", d.Kind, err)
			}
		}
		if len(defs) < store.MaxDefinitionsPage {
			return nil
		}
		after = defs[len(defs)-1].Kind
	}
}

// migrateDocuments creates in dst each document of collections it lacks.
func migrateDocuments(ctx context.Context, src, dst store.Store, collections []string, r *MigrateReport) error {
	for _, coll := range collections {
		after := ""
		for {
			page, err := src.ListDocuments(ctx, &store.ListDocumentsParams{Collection: coll, After: after})
			if err != nil {
				return fmt.Errorf("migrate: list documents of %q: %w", coll, err)
			}
			for _, d := range page.Documents {
				_, err := dst.PutDocument(ctx, &store.PutDocumentParams{Collection: coll, Name: d.Name, Body: d.Body, IfVersion: 0, Now: time.Now()})
				switch {
				case err == nil:
					r.Documents++
				case errors.Is(err, store.ErrConflict):
					r.DocumentsExisting++
				default:
					return fmt.Errorf("migrate: document %q of %q: %w", d.Name, coll, err)
				}
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
	}
	return nil
}

// rescueSource sends back to Scheduled the attempts of src's stale nodes
// and those whose lease lapsed, as a manager's rescuer would.
func rescueSource(ctx context.Context, src store.Store, o MigrateOptions, r *MigrateReport) error {
	for {
		res, err := src.RescueNodes(ctx, &store.RescueNodesParams{Now: time.Now(), Node: o.Node, DeadAfter: o.DeadAfter, Limit: o.Batch})
		if err != nil {
			return fmt.Errorf("migrate: rescue the source's dead nodes: %w", err)
		}
		r.Rescued += len(res.Rescued)
		if len(res.Rescued) < o.Batch {
			break
		}
	}
	for {
		res, err := src.Rescue(ctx, &store.RescueParams{Now: time.Now(), Limit: o.Batch, Node: o.Node})
		if err != nil {
			return fmt.Errorf("migrate: rescue the source's lapsed leases: %w", err)
		}
		r.Rescued += len(res)
		if len(res) < o.Batch {
			return nil
		}
	}
}

// migrateScheduled moves src's Scheduled instances to dst, a page at a
// time: enqueue in dst (an ID there already is done), then delete from
// src.
func migrateScheduled(ctx context.Context, src, dst store.Store, o MigrateOptions, r *MigrateReport) error {
	cursor := ""
	for {
		page, err := src.PageInstances(ctx, &store.Query{States: []store.State{store.Scheduled}, Limit: o.Batch, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("migrate: page the source's scheduled instances: %w", err)
		}
		var move []*store.Instance
		for _, in := range page.Instances {
			switch {
			case in.Task != nil:
				r.Skipped = append(r.Skipped, MigrateSkip{in.ID, "a workflow task: let its workflow finish before migrating"})
			case in.Parent != "" || in.ShardCount > 0:
				r.Skipped = append(r.Skipped, MigrateSkip{in.ID, "a sharded task or shard: let it finish before migrating"})
			default:
				move = append(move, movable(in))
			}
		}
		if len(move) > 0 {
			if err := moveBatch(ctx, src, dst, o, move, r); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		cursor = page.Next
	}
}

// movable returns the record Enqueue stores for in in the target.
func movable(in *store.Instance) *store.Instance {
	c := in.Clone()
	c.State = store.Scheduled
	c.Seq = 0
	// Enqueue starts every instance at attempt 0: keep the retries left
	// instead (one waiting for its last retry runs once more, as it would
	// have).
	if c.MaxRetries >= 0 {
		c.MaxRetries = max(0, c.MaxRetries-c.Attempt)
	}
	c.Attempt = 0
	c.LeaseOwner, c.LeaseUntil, c.CancelRequested = "", time.Time{}, false
	c.FinishedAt, c.Result = time.Time{}, nil
	return c
}

// moveBatch enqueues ins in dst and deletes from src those now in dst.
func moveBatch(ctx context.Context, src, dst store.Store, o MigrateOptions, ins []*store.Instance, r *MigrateReport) error {
	// The instances an earlier run put in the target: a partitioned
	// store's Enqueue is idempotent by ID only within a partition, and an
	// instance without a unique key goes to the call's partition, which
	// a rerun's call need not share. So look first (every partition, at
	// once), and enqueue only what no partition holds.
	ids := make([]string, len(ins))
	for i, in := range ins {
		ids[i] = in.ID
	}
	there, err := dst.LookupInstances(ctx, &store.Query{IDs: ids})
	if err != nil {
		return fmt.Errorf("migrate: look up %d instances in the target: %w", len(ids), err)
	}
	held := map[string]bool{}
	for _, in := range there {
		held[in.ID] = true
	}
	var del []string
	var add []*store.Instance
	for _, in := range ins {
		if held[in.ID] {
			del = append(del, in.ID)
		} else {
			add = append(add, in)
		}
	}
	existed := len(del)
	var res []store.EnqueueResult
	if len(add) > 0 {
		res, err = dst.Enqueue(ctx, &store.EnqueueParams{Instances: add, Node: o.Node, Now: time.Now()})
		if err != nil {
			return fmt.Errorf("migrate: enqueue %d instances in the target (run the migration again): %w", len(add), err)
		}
	}
	ins = add
	for i, x := range res {
		switch {
		case x.Err == nil:
			del = append(del, ins[i].ID)
			if x.Existed {
				existed++
			}
		case errors.Is(x.Err, store.ErrDuplicate):
			r.Skipped = append(r.Skipped, MigrateSkip{ins[i].ID, fmt.Sprintf("its unique key %q is held in the target by %s", ins[i].UniqueKey, x.ID)})
		default:
			r.Skipped = append(r.Skipped, MigrateSkip{ins[i].ID, x.Err.Error()})
		}
	}
	if len(del) == 0 {
		return nil
	}
	out, err := src.Delete(ctx, &store.DeleteParams{IDs: del, Now: time.Now(), Node: o.Node})
	if err != nil {
		return fmt.Errorf("migrate: delete %d moved instances from the source (run the migration again): %w", len(del), err)
	}
	for i, x := range out {
		if x.Err != nil && !errors.Is(x.Err, store.ErrNotFound) {
			return fmt.Errorf("migrate: delete moved instance %s from the source (run the migration again): %w", del[i], x.Err)
		}
	}
	r.Moved += len(del)
	r.InTargetAlready += existed
	return nil
}
