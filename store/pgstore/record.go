package pgstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// instCols are the columns of an instance row, in the order scanInst reads
// them; prefix them with an alias where a query needs one (instColsOf).
const instCols = `id, seq, kind, queue, args, priority, run_at, state, attempt, max_retries, timeout,
	unique_key, unique_until, lease_owner, lease_until, cancel_req, created_at, updated_at, finished_at,
	result, error, labels, metadata::text, parent, shard_index, shard_count, task`

// instColsOf returns instCols qualified by alias.
func instColsOf(alias string) string {
	return alias + ".id, " + alias + ".seq, " + alias + ".kind, " + alias + ".queue, " + alias + ".args, " +
		alias + ".priority, " + alias + ".run_at, " + alias + ".state, " + alias + ".attempt, " + alias + ".max_retries, " +
		alias + ".timeout, " + alias + ".unique_key, " + alias + ".unique_until, " + alias + ".lease_owner, " +
		alias + ".lease_until, " + alias + ".cancel_req, " + alias + ".created_at, " + alias + ".updated_at, " +
		alias + ".finished_at, " + alias + ".result, " + alias + ".error, " + alias + ".labels, " + alias + ".metadata::text, " +
		alias + ".parent, " + alias + ".shard_index, " + alias + ".shard_count, " + alias + ".task"
}

// row is an instance row as scanned, before it is checked.
type row struct {
	id, kind, queue          string
	seq                      int64
	args, result             []byte
	priority                 int64
	runAt                    int64
	state                    int16
	attempt, maxRetries      int32
	timeout                  int64
	uniqueKey, leaseOwner    *string
	uniqueUntil, leaseUntil  int64
	cancelReq                bool
	created, updated, finish int64
	errMsg                   string
	labels                   []string
	metadata                 *string
	parent                   *string
	shardIndex, shardCount   int32
	task                     *string
}

func (r *row) dest() []any {
	return []any{&r.id, &r.seq, &r.kind, &r.queue, &r.args, &r.priority, &r.runAt, &r.state, &r.attempt,
		&r.maxRetries, &r.timeout, &r.uniqueKey, &r.uniqueUntil, &r.leaseOwner, &r.leaseUntil, &r.cancelReq,
		&r.created, &r.updated, &r.finish, &r.result, &r.errMsg, &r.labels, &r.metadata,
		&r.parent, &r.shardIndex, &r.shardCount, &r.task}
}

// instance checks r and returns it as a store.Instance; a row that breaks
// the store's invariants (edited by hand, or by a broken release) is an
// error wrapping store.ErrCorrupt that names it.
func (r *row) instance() (*store.Instance, error) {
	st := store.State(r.state)
	if !st.Valid() || r.state != int16(st) {
		return nil, fmt.Errorf("pgstore: instance %s: stored state %d is not a state: %w", r.id, r.state, store.ErrCorrupt)
	}
	if r.seq <= 0 {
		return nil, fmt.Errorf("pgstore: instance %s: stored seq %d: %w", r.id, r.seq, store.ErrCorrupt)
	}
	in := &store.Instance{
		ID: r.id, Kind: r.kind, Queue: r.queue, Args: r.args, Priority: int(r.priority),
		RunAt: fromNanos(r.runAt), State: st, Attempt: int(r.attempt), MaxRetries: int(r.maxRetries),
		Timeout: time.Duration(r.timeout), UniqueUntil: fromNanos(r.uniqueUntil), LeaseUntil: fromNanos(r.leaseUntil),
		CancelRequested: r.cancelReq, Seq: uint64(r.seq), CreatedAt: fromNanos(r.created), UpdatedAt: fromNanos(r.updated),
		FinishedAt: fromNanos(r.finish), Result: r.result, Error: r.errMsg,
	}
	if r.uniqueKey != nil {
		in.UniqueKey = *r.uniqueKey
	}
	if r.leaseOwner != nil {
		in.LeaseOwner = *r.leaseOwner
	}
	if len(r.labels) > 0 {
		in.Labels = r.labels
	}
	if r.parent != nil {
		in.Parent = *r.parent
	}
	if r.task != nil {
		t, err := store.UnmarshalTask([]byte(*r.task))
		if err != nil {
			return nil, fmt.Errorf("pgstore: instance %s: %w", r.id, err)
		}
		in.Task = t
	}
	in.ShardIndex, in.ShardCount = int(r.shardIndex), int(r.shardCount)
	if r.metadata != nil {
		if err := json.Unmarshal([]byte(*r.metadata), &in.Metadata); err != nil {
			return nil, fmt.Errorf("pgstore: instance %s: stored metadata: %v: %w", r.id, err, store.ErrCorrupt)
		}
		if len(in.Metadata) == 0 {
			in.Metadata = nil
		}
	}
	return in, nil
}

// scanInstances reads instance rows (instCols). Rows that cannot be
// decoded are left out and named in the returned error (wrapping
// store.ErrCorrupt), after every row was read.
func scanInstances(rows pgx.Rows) ([]*store.Instance, []*row, error) {
	defer rows.Close()
	var out []*store.Instance
	var bad []*row
	var firstBad error
	for rows.Next() {
		r := &row{}
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, nil, err
		}
		in, err := r.instance()
		if err != nil {
			bad = append(bad, r)
			if firstBad == nil {
				firstBad = err
			}
			continue
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if firstBad != nil {
		return out, bad, fmt.Errorf("%d undecodable instance rows left out, the first: %w", len(bad), firstBad)
	}
	return out, nil, nil
}

// encodeMetadata returns md as JSON text, "" for none (stored as NULL).
func encodeMetadata(md map[string]string) string {
	if len(md) == 0 {
		return ""
	}
	b, _ := json.Marshal(md) // string pairs: cannot fail
	return string(b)
}
