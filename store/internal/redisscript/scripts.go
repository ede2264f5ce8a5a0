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
//   - q:<queue>:r:<prio> (LIST) and q:<queue>:p (ZSET of priorities):
//     ready IDs per priority in the order they became ready; a claim is
//     LPOPs from the highest priorities, O(1) per instance.
//   - q:<queue>:s (ZSET): instances waiting for their RunAt; Claim moves
//     the due ones to the back of their ready list.
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
//     by CreatedAt second, for lookups, appended to with APPEND; ctr
//     counts each kind's instances.
//
// A lookup by state first asks the plan script which read is smaller: the
// states' own structures (ready lists and scheduled sets, the run set, the
// done lists) or the kind buckets over the time range; so what runs, waits
// or failed is found without reading the completed history.
//   - hist (STREAM): one entry per script run that changed states, holding
//     every record of the run; an entry's ID is its time in ms (kept
//     monotonic), so a time range is an XRANGE. An instance's spec names
//     its enqueue entry and its state lists the others.
//   - logs (STREAM): one entry per log record; l:<id> (LIST) keeps an
//     instance's log entry IDs.
//   - uniq (HASH) and uniqx (ZSET): unique keys and their expiry.
//   - w:<queue>: the pub/sub channel scripts PUBLISH to when work may be
//     ready.
//
// Instance IDs that are UUIDs in canonical form are stored as 17 bytes
// (see EncodeID); others as they are, behind one marker byte.
package redisscript

import (
	"embed"
	"strings"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Script is one Lua script: lib.lua followed by the script's own source.
type Script struct {
	Name   string // file name without .lua
	Source string
	// ReadOnly scripts write nothing.
	ReadOnly bool
}

// The scripts. Their contracts are in the comment at the top of each file
// under lua/.
var (
	Enqueue     = load("enqueue", false)
	Claim       = load("claim", false)
	Renew       = load("renew", false)
	Finish      = load("finish", false)
	Rescue      = load("rescue", false)
	Cancel      = load("cancel", false)
	AppendLogs  = load("append_logs", false)
	OfInstances = load("of_instances", true)
	Records     = load("records", true)
	Plan        = load("plan", true)
	Range       = load("stream_range", true)
	Prune       = load("prune", false)
)

// All lists every script, for plugins that prepare them up front.
var All = []*Script{Enqueue, Claim, Renew, Finish, Rescue, Cancel, AppendLogs, OfInstances, Records, Plan, Range, Prune}

func load(name string, ro bool) *Script {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	src, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	b.Write(lib)
	b.WriteString("\n-- ---- " + name + ".lua ----\n")
	b.Write(src)
	return &Script{Name: name, Source: b.String(), ReadOnly: ro}
}
