package pgstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobkit/job/store"
)

// copyMin is the smallest batch Enqueue stores with COPY. Below it the
// one statement of stmts.enqueue (one round trip) costs less than COPY's
// transaction of four.
const copyMin = 64

// instColsCopy are the columns enqueueCopy gives, in its rows' order.
var instColsCopy = []string{"ns", "id", "seq", "kind", "queue", "args", "priority", "run_at", "state", "max_retries", "timeout",
	"unique_until", "created_at", "updated_at", "labels", "metadata", "parent", "shard_index", "shard_count", "label_expr", "enq_last", "task"}

var copyTail sync.Map // quoted schema -> statement

// copyTailStmt is what follows the COPY of a batch's instances: their
// queues registered (with their priorities), their Created and Scheduled
// records written (one row of enqueued, migration 0012: $7 its key, $8
// the time, $9 the node, $10 the Seqs and $11 the IDs, in batch order),
// their counter changes added and their queues notified.
func (s *Store) copyTailStmt() string {
	if v, ok := copyTail.Load(s.cfg.quoted); ok {
		return v.(string)
	}
	q := `WITH x AS (SELECT * FROM unnest($2::text[], $3::text[], $6::int8[]) AS x(kind, queue, priority)),
q AS (` + s.addQueues("x") + `),
h AS (INSERT INTO ` + s.t("enqueued") + ` (ns, last, t, node, seqs, ids, kinds, queues)
	VALUES ($1, $7, $8, $9, $10::int8[], $11::text[], $2::text[], $3::text[]) RETURNING 1),
c AS (INSERT INTO ` + s.t("count_deltas") + ` (ns, queue, kind, state, n)
	SELECT $1, x.queue, x.kind, 2, count(*) FROM x GROUP BY x.queue, x.kind RETURNING 1),
w AS (SELECT pg_notify($4, $5::text || d.queue) FROM (SELECT DISTINCT queue FROM x) AS d)
SELECT (SELECT count(*) FROM q), (SELECT count(*) FROM h) + (SELECT count(*) FROM c), (SELECT count(*) FROM w)`
	copyTail.Store(s.cfg.quoted, q)
	return q
}

// errCopyConflict: the COPY of a batch met an instance ID stored already.
var errCopyConflict = errors.New("pgstore: an instance of the batch is stored already")

// canCopy reports whether enqueueCopy may store p: a batch of copyMin or
// more, in a transaction of the store's own (a COPY that fails on a stored
// ID would abort a caller's transaction), without a unique key or an ID
// given twice.
func canCopy(ctx context.Context, p *store.EnqueueParams) bool {
	if len(p.Instances) < copyMin || txFrom(ctx) != nil {
		return false
	}
	seen := make(map[string]struct{}, len(p.Instances))
	for _, in := range p.Instances {
		if in.UniqueKey != "" {
			return false
		}
		if _, ok := seen[in.ID]; ok {
			return false
		}
		seen[in.ID] = struct{}{}
	}
	return true
}

// enqueueCopy stores a batch canCopy accepts in one transaction: the
// batch's Seqs taken in batch order, the instances written with COPY
// (PostgreSQL then fills heap pages several rows per WAL record, and
// there is no speculative insertion as with ON CONFLICT), then
// copyTailStmt, which writes the batch's records in one row. A batch
// holding an ID stored already is rolled back and
// errCopyConflict returned: the caller stores it the other way, which
// reports that instance Existed.
func (s *Store) enqueueCopy(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	n := len(p.Instances)
	res := make([]store.EnqueueResult, n)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT nextval('`+strings.ReplaceAll(s.t("seq"), "'", "''")+`') FROM generate_series(1, $1)`, n)
		if err != nil {
			return err
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		slices.Sort(seqs)
		now := nanos(p.Now)
		ids, kinds, queues := make([]string, n), make([]string, n), make([]string, n)
		prios := make([]int64, n)
		_, err = tx.CopyFrom(ctx, pgx.Identifier{s.cfg.schema, "instances"}, instColsCopy, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			in := p.Instances[i]
			ids[i], kinds[i], queues[i], prios[i] = in.ID, in.Kind, in.Queue, int64(in.Priority)
			var labels []string
			var expr bool
			if l := store.NormLabels(in.Labels); len(l) > 0 {
				labels = l
				for _, r := range l {
					expr = expr || strings.ContainsAny(r, "!|")
				}
			}
			var md, parent any
			if m := encodeMetadata(in.Metadata); m != "" {
				md = m
			}
			if in.Parent != "" {
				parent = in.Parent
			}
			var task any
			if in.Task != nil {
				task = string(store.MarshalTask(in.Task))
			}
			return []any{s.cfg.ns, in.ID, seqs[i], in.Kind, in.Queue, in.Args, int64(in.Priority), nanos(in.RunAt), int16(store.Scheduled),
				clamp32(in.MaxRetries), int64(in.Timeout), nanos(in.UniqueUntil), nanos(in.CreatedAt), now, labels, md, parent,
				clamp32(in.ShardIndex), clamp32(in.ShardCount), expr, seqs[n-1], task}, nil
		}))
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "instances_pkey" {
				return errCopyConflict
			}
			return err
		}
		var a, b, c int64
		if err := tx.QueryRow(ctx, s.copyTailStmt(), s.cfg.ns, kinds, queues,
			s.channel, strconv.Itoa(len(s.cfg.ns))+":"+s.cfg.ns, prios, seqs[n-1], now, p.Node, seqs, ids).Scan(&a, &b, &c); err != nil {
			return err
		}
		for i, in := range p.Instances {
			res[i] = store.EnqueueResult{ID: in.ID, Seq: uint64(seqs[i])}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.wroteCounts()
	return res, nil
}
