// Package etcdstore is a jobkit store on etcd (go.etcd.io/etcd/client/v3):
// several processes sharing one etcd cluster and one namespace act as one
// jobkit cluster, with etcd's transactions as the only coordination.
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
//	...
//	st, err := etcdstore.New(cli, etcdstore.WithNamespace("myapp"))
//	...
//	defer st.Close() // ends the store's etcd lease; the client stays open
//	mgr, err := job.NewManager(job.WithStore(st))
//
// The client belongs to the caller and is never closed by the store.
//
// # Supported servers
//
// etcd 3.6 (tested: 3.6.16, built from its Go module by make test) and
// 3.4, the oldest supported (tested: Debian's etcd-server 3.4.23, with this
// package's own tests), with the v3.7 client; 3.5 is expected to work and
// is not tested. The etcd settings the store needs (space quota,
// compaction, defragmentation) and what a full etcd does to jobs are in
// doc/etcd.md. The store uses only the KV, Txn, Lease and Watch APIs
// that 3.4 has; it does not use RejectOldCluster or the 3.7 streaming range
// (GetStream), which 3.4 lacks. On 3.4 a Range walks its whole key range in
// the server's index even when it has a limit; the claim path bounds its
// ranges itself to stay flat (see Claiming), and the other paths read small
// ranges. Each transaction holds at most 128 operations (etcd's default
// --max-txn-ops; see WithMaxTxnOps) and about 1 MiB (under the default
// --max-request-bytes of 1.5 MiB; see WithMaxValueBytes).
//
// # Keys
//
// Every key lives under the namespace's prefix "jobkit/<ns>/"; numbers in
// keys are fixed-width hex so byte order is numeric order. An instance is two records: a static one
// (i/<id>: kind, queue, arguments, ...) written once, and a small dynamic
// one (s/<id>: state, attempt, lease, result) that every transition
// rewrites, so state changes never copy the arguments. A Scheduled instance
// also has a ready-index key
//
//	r/<queue>/<inverted priority>/<run at><seq>
//
// whose value is a copy of its dynamic record, so the key order is the claim
// order (highest priority, then earliest run time, then FIFO) and a claim
// needs nothing but a range read. An index by creation time (whose
// entries name kind and sequence number) and one by finish time, and log
// indexes by time and kind, let every lookup and every retention rule walk
// only the keys it wants. The creation and finish indexes are batched: a
// transaction writes one key per 100 ms of the times it lists (so an
// Enqueue of many instances, or a Finish of many outcomes, writes one
// index key, not one each), and a walk merges each 100 ms bucket's keys
// into exact order; namespaces written before this layout keep their one
// key per instance, read beside the batches (batches.go). The full layout
// is in keys.go.
//
// # Claiming
//
// A claim reads, in one read transaction, the first ready keys of each
// lane of the queue it may take (the lanes are marker keys under
// qp/<queue>/), then takes its picks in one write transaction per batch:
// each pick is guarded by a compare on its ready key's ModRevision, deletes
// the key, writes the new dynamic record and the claim record. When a
// compare fails, the transaction's failure branch reads the guarded keys
// back, so the picks still free are retried at once and only the lost
// ones are replaced. Uncontended, a claim takes the head in order and
// reads one ready entry more than it takes; once a handle has lost a race
// it picks at random among the first 2·Limit+4·32 (WithClaimWindow) ready
// keys for a second, so claimers spread over the queue instead of all
// fighting for its head.
//
// etcd's cost of a limited range grows with the keys in the range (every
// etcd version walks the whole range in its index), and with the keys
// deleted in it since etcd last compacted, which its index keeps until
// then: a claimed ready key is one. So the store remembers, per lane, a
// key about 16 windows deep into the ready range (the last ready key of
// a shorter lane) and reads only up to it (the whole range is read only
// when that part is used up), and it
// reads from where the previous claim found the head, not from the
// lane's start: a write that adds a ready key below that point moves the
// lane marker's revision, which the claim's read compares, and each
// handle reads every lane from its start at least once a second. Claim
// cost therefore stays flat with queue depth and with etcd's compaction
// interval (see the benchmarks).
//
// # Ownership and leases
//
// Each Store takes one etcd lease (WithLeaseTTL, default 10 s) on its first
// claim and keeps it alive; a liveness key a/<lease> is attached to it. A
// claimed instance records the lease it was claimed under. When the process
// dies, the lease ends after its TTL, the liveness key vanishes, and Rescue
// takes the instance back — without waiting for the contract lease deadline
// (the LeaseUntil the engine sets and renews). Renew rewrites the deadline
// of all the given attempts in one transaction per batch and reports as
// Lost an attempt whose claiming handle's etcd lease has ended (the process
// was cut off for longer than the TTL), so its job is stopped and never
// completed twice. Close revokes the lease, which makes whatever the handle
// still holds rescuable at once.
//
// # Node registry
//
// Managers heartbeat into n/<node>. etcd has no clock API: a handle
// declares a node dead once it has seen its record keep one revision for
// the dead threshold on its own monotonic clock, and the clock Heartbeat
// returns is the median of the live nodes' clocks sampled from a watch
// (see nodes.go for how, and its limits: an even number of nodes is judged
// by the middle node registered first; a handle knows the median only
// after watching for the dead threshold). Claims index running attempts by
// owner (no/<owner>/<id>) so a dead node's are rescued without a scan.
//
// # Other behaviour
//
// Enqueue numbers its instances from a ticket, a revision above that of
// every Enqueue applied before the call, so sequence numbers increase in
// enqueue order across every handle. A call reads its ticket (with any
// unique-key reads) and then writes: two round trips. A lone call (no
// other Enqueue of the handle under way, no unique keys, one transaction,
// lanes the handle has written to) writes at once instead, taking the
// newest revision the handle has seen for its ticket, on the condition
// that no Enqueue write came after it (every one puts the ticket key tk):
// one round trip. When the condition fails (another handle enqueued
// since), the failure branch reads what the read would have, and the call
// writes again; the handle then reads first for a second. See
// enqueue_fast.go, and its note on rolling upgrades. Unique keys (and so
// recurring ticks) are claimed create-if-absent, or over an expired holder
// compared on its revision, and are attached to a shared etcd lease that
// outlives their expiry, so etcd deletes them eventually. Subscribe is an
// etcd Watch on the queue's ready index. Records that do not decode are
// left out of lookups with an error wrapping store.ErrCorrupt that names
// their keys; an undecodable ready-index entry is moved to bad/ so the
// queue keeps working. Instances, results and log messages over
// WithMaxValueBytes are refused with store.ErrTooLarge. Every call is
// bounded by its ctx and by WithOpTimeout (15 s) when the ctx has no
// deadline; errors name the etcd endpoints.
//
// # Events
//
// Follow (store.Events) is an etcd Watch on the history records (h/) from
// the revision after the cursor; a cursor names a revision and how many
// history records of it were delivered. History retention deletes
// records, but a watch from before the delete still replays their puts,
// so a cursor stays good until etcd compacts past it; then it is
// store.ErrCursorExpired. Compaction is the operator's: with
// --auto-compaction-retention, that is how far back a consumer may resume.
// A lookup reads all its pages at one revision; one that etcd compacts
// past while it runs starts again at the newest revision.
//
// Once one of an Enqueue's write transactions went out and got no answer (the ctx's deadline, a broken connection,
// etcd's own "request timed out" or "leader changed", after which the
// proposal may still commit), or applied before the call failed, the
// call's error wraps store.ErrOutcomeUnknown as well as the cause, and
// ScheduleJob's names WithIdempotencyKey as the safe retry. A failure in
// a read that comes first (etcd unreachable or stalled), etcd's refusal
// of the write (no space, too large, no permission), a connection never
// made and a ctx that had ended before are certain: nothing was stored,
// and the error does not wrap it. A lone call's first request is its
// write, so etcd stalling under it leaves the outcome unknown.
//
// # Benchmarks
//
//	go test -run '^$' -bench . -benchtime 2000x ./store/etcdstore/
//
// measures claim cost at depths of 1k, 10k and 100k ready instances,
// enqueue batches, and the claim+finish cycle with 1 and 8 workers and 1,
// 10 and 50 instances per claim. It starts its own etcd unless
// $JOBKIT_ETCD_ENDPOINTS names one.
package etcdstore
