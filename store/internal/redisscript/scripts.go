// Package redisscript holds what the Redis and Valkey store plugins share so
// they cannot drift apart: the Lua scripts (embedded, each headed by its
// KEYS / ARGV / return contract), the key layout of a namespace, the record
// encoding, and Core, the store.Store built on those scripts. A plugin only
// supplies a Runner that evaluates a script and subscribes to a channel
// with its client library.
//
// # Layout of a namespace
//
// Every key of namespace ns starts with "jobkit:{ns}:", so the whole
// namespace hashes to one Redis Cluster slot and every script's keys are in
// it. See lua/lib.lua for every key and field. In short:
//
//   - inst (HASH): ID → spec, what never changes after enqueue (kind,
//     queue, args, priority, ...), written once as consecutive MessagePack
//     values. The hot scripts (claim, finish, renew) never decode it.
//   - st (HASH): ID → state, a small MessagePack array of what changes
//     (state, attempt, lease, result, error, history refs). An instance
//     that has not run yet has none, which keeps a pending job small.
//   - q:<queue>:r:<prio>/<lane> (LIST) and q:<queue>:p (ZSET, the
//     non-empty lanes per priority): ready IDs per priority and lane (a
//     kind with the labels its instances require) in the order they became
//     ready; a claim reads the lane index once, keeps the lanes the
//     claimer may take (its kinds, its labels) and pops from them, highest
//     priority first, merging lanes of one priority by RunAt then Seq:
//     O(1) per instance plus O(1) per lane it may take.
//   - q:<queue>:s (ZSET): instances waiting for their RunAt; Claim moves
//     the due ones to the back of their lane's ready list.
//   - paused (SET): the paused queues; a claim from one takes nothing.
//   - lease (ZSET): lease batches by deadline, for Rescue: a member lists
//     the IDs one claim or renew gave that deadline, so a claim adds one
//     member and a finish none.
//   - run (SET): the IDs of the Processing instances, for lookups by
//     state (the lease batches also list IDs that finished since).
//   - done:<state> (LIST, one per final state) and late (ZSET): final
//     instances in finishing order, for retention (which takes the oldest
//     across them) and lookups by state; those finished by a clock behind
//     their list's tail go to the late set.
//   - kd:<kind> (ZSET) and kb:<kind>:<sec> (STRING): instances of a kind
//     by CreatedAt second, for lookups, appended to with APPEND; kn:<kind>
//     counts the live instances of each second's bucket.
//   - cnt (HASH): instances by state, queue and kind (store.Counts); the
//     lookup planner sums a kind's fields. (A namespace written before
//     issue 39 also counted each kind in ctr's k:<kind>; nothing reads
//     those fields, and prune and delete drop them.)
//
// A lookup by state first asks the plan script which read is smaller: the
// states' own structures (ready lists and scheduled sets, the run set, the
// done lists) or the kind buckets over the time range; so what runs, waits
// or failed is found without reading the completed history.
//   - hist (STREAM): one entry per script run that changed states, holding
//     every record of the run; an entry's ID is its time in ms (kept
//     monotonic), so a time range is an XRANGE. An instance's spec names
//     its enqueue entry and its state lists the others. It is also the
//     event feed (store.Events): a cursor is an entry ID and how many of
//     its records were delivered, and the stream's max-deleted-entry-id
//     tells when entries after a cursor were pruned.
//   - logs (STREAM): one entry per log record; l:<id> (LIST) keeps an
//     instance's log entry IDs.
//   - prog (HASH): ID → the progress its running attempt last reported
//     (store.Progress), removed with the instance.
//   - uniq (HASH) and uniqx (ZSET): unique keys and their expiry.
//   - w:<queue>: the pub/sub channel scripts PUBLISH to when work may be
//     ready.
//   - nodes, nseen, nlive, ngone, nstat, ndead, no:<owner>, nd:<owner>: the
//     node registry and the per-owner index of running attempts (see
//     lua/nodes_heartbeat.lua and lua/nodes_rescue.lua); liveness is judged
//     on the server's TIME.
//
// Instance IDs that are UUIDs in canonical form are stored as 17 bytes
// (see EncodeID); others as they are, behind one marker byte.
package redisscript

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
	"sync"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Script is one Lua script. Source, for EVAL and servers without
// Functions, is a shebang line with the script's flags, then lib.lua, then
// the call's start (begin_head, begin_changes), then the script's own
// source; Function names it in Library, which servers with Functions run.
//
// The flags (Redis 7 / Valkey 7.2 and later) make the server check, before
// the script runs, what it may do. A script without allow-oom is refused
// as a whole while the server is over its maxmemory (noeviction): it never
// changes half of what it would (without flags, Redis checks only at a
// script's first write, and a claim, whose first writes free memory, went
// on writing). Only Renew (so running attempts keep their leases instead of
// being rescued and run twice), Prune and AdminDelete (which free memory)
// may run then; read-only scripts are no-writes.
type Script struct {
	Name   string // file name without .lua
	Source string
	// ReadOnly scripts write nothing.
	ReadOnly bool
	// Function is the script's name in Library (FCALL's first argument).
	Function string
	// flags of the shebang line ("" for none), src the script's own
	// source, lean whether it uses only lib.lua's head, bare whether it
	// uses none of lib.lua, own whether it sets what it uses of lib.lua's
	// state itself (its function calls no begin_head).
	flags, src      string
	lean, bare, own bool
}

// The scripts. Their contracts are in the comment at the top of each file
// under lua/.
var (
	Enqueue = loadLean("enqueue", "")
	// EnqueueOne is Enqueue for a call of one instance, due at once,
	// without a unique key (EnqueueOneArgs).
	EnqueueOne    = startsItself(loadLean("enqueue_one", ""))
	Claim         = load("claim", "")
	Renew         = load("renew", "allow-oom")
	Finish        = load("finish", "")
	Rescue        = load("rescue", "")
	Cancel        = load("cancel", "")
	AppendLogs    = load("append_logs", "")
	OfInstances   = load("of_instances", "no-writes")
	Records       = load("records", "no-writes")
	OrderKeys     = loadLean("order_keys", "no-writes")
	Plan          = load("plan", "no-writes")
	Range         = load("stream_range", "no-writes")
	Prune         = load("prune", "allow-oom")
	EventsRead    = load("events", "no-writes")
	InspectLag    = load("inspect_lag", "no-writes")
	InspectCounts = load("inspect_counts", "no-writes")
	QueueAdmin    = load("queue_admin", "")
	// The node registry. A heartbeat may run while Redis is at its
	// maxmemory, as Renew may: a node that cannot heartbeat fences itself.
	NodesHeartbeat = load("nodes_heartbeat", "allow-oom")
	NodesList      = load("nodes_list", "no-writes")
	NodesRescue    = load("nodes_rescue", "")
	// Admin: Retry and Delete. A delete may run at maxmemory, as Prune
	// may: it frees memory.
	AdminRetry  = load("admin_retry", "")
	AdminDelete = load("admin_delete", "allow-oom")
	// Progress of running attempts, kept beside the instances (prog).
	ProgressSet    = loadLean("progress_set", "")
	ProgressLookup = loadLean("progress_lookup", "no-writes")
	// Wake makes the parent of a sharded task due now (store.Shards).
	Wake = load("wake", "")
)

// All lists every script, for plugins that prepare them up front.
var All = []*Script{Enqueue, EnqueueOne, Claim, Renew, Finish, Rescue, Cancel, AppendLogs, OfInstances, Records, OrderKeys, Plan, Range, Prune,
	EventsRead, InspectLag, InspectCounts, QueueAdmin, NodesHeartbeat, NodesList, NodesRescue, AdminRetry, AdminDelete,
	ProgressSet, ProgressLookup, Wake}

// libChanges starts the part of lib.lua that only scripts changing
// stored instances use (history records of a change, commit, leases,
// finishing, rescue).
const libChanges = "\n-- ---- state changes ----\n"

// load builds the script of lua/<name>.lua with the given shebang flags
// ("no-writes" marks it read-only).
func load(name, flags string) *Script {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	return build(name, flags, lib)
}

// loadLean builds the script of lua/<name>.lua with lib.lua only up to
// its state changes section, for a script that only adds instances.
// Redis runs the top level of a script, lib.lua's included, on every call,
// making each helper afresh: the helpers the script never calls cost it
// time on every call (about half of lib.lua's, some 5 µs of Redis time per
// enqueue: BenchmarkScheduleBreakdown in store/redisstore).
func loadLean(name, flags string) *Script {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	head, _, ok := strings.Cut(string(lib), libChanges)
	if !ok {
		panic("lua/lib.lua has no state changes section")
	}
	return build(name, flags, []byte(head))
}

// startsItself marks s as a script that sets what it uses of lib.lua's
// state itself: its function calls no begin_head, whose tables a lone
// enqueue never uses (lua/enqueue_one.lua).
func startsItself(s *Script) *Script {
	s.own = true
	return s
}

func build(name, flags string, lib []byte) *Script {
	src, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	b.WriteString("#!lua")
	if flags != "" {
		b.WriteString(" flags=" + flags)
	}
	b.WriteString("\n")
	b.Write(lib)
	b.WriteString("\nbegin_head()\n")
	lean := len(lib) < len(libSource())
	if !lean {
		b.WriteString("begin_changes()\n")
	}
	b.WriteString("-- ---- " + name + ".lua ----\n")
	b.Write(src)
	return &Script{Name: name, Source: b.String(), ReadOnly: flags == "no-writes", flags: flags, src: string(src), lean: lean}
}

func libSource() []byte {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	return lib
}

// Library returns every script as one Redis Functions library (Redis 7.0 and
// later, Valkey): loaded once per server with FUNCTION LOAD REPLACE, its
// top level (lib.lua) runs once at load, not on every call as a script's
// does, and each script is a function called with FCALL (FCALL_RO for
// the read-only ones). Its name, and every function's, carries a hash of
// its source, so nodes running different versions of jobkit on one
// server each call their own.
// Call it after package initialization (All is complete only then).
var Library = sync.OnceValue(func() LibraryInfo { return buildLibrary(All) })

// LibraryInfo is a Functions library: its name and its source for
// FUNCTION LOAD.
type LibraryInfo struct {
	Name   string
	Source string
}

func buildLibrary(all []*Script) LibraryInfo {
	var body strings.Builder
	body.WriteString("local KEYS, ARGV\n")
	body.Write(libSource())
	for _, s := range all {
		body.WriteString("\n-- ---- " + s.Name + ".lua ----\n")
		body.WriteString("redis.register_function{function_name = '@@_" + s.Name + "',")
		if s.flags != "" {
			body.WriteString(" flags = {'" + s.flags + "'},")
		}
		body.WriteString(" callback = function(keys, args)\nKEYS, ARGV = keys, args\n")
		if !s.bare && !s.own {
			body.WriteString("begin_head()\n")
		}
		if !s.lean && !s.bare {
			body.WriteString("begin_changes()\n")
		}
		body.WriteString(s.src)
		body.WriteString("\nend}\n")
	}
	sum := sha1.Sum([]byte(body.String()))
	name := "jobkit_" + hex.EncodeToString(sum[:8])
	for _, s := range all {
		s.Function = name + "_" + s.Name
	}
	return LibraryInfo{Name: name, Source: "#!lua name=" + name + "\n" + strings.ReplaceAll(body.String(), "'@@_", "'"+name+"_")}
}
