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
// it. See lua/lib.lua for the keys and the record fields. In short:
//
//   - inst (HASH): ID → record, a cmsgpack array of the instance's fields.
//   - q:<queue>:r (ZSET): ready instances; score −Priority, member
//     RunAt(7 bytes) ‖ Seq(6 bytes) ‖ ID, so one ZRANGE yields the claim
//     order (priority, RunAt, FIFO) in O(log n).
//   - q:<queue>:s (ZSET): instances waiting for their RunAt (score RunAt);
//     Claim moves the due ones to the ready set, so a high-priority future
//     instance never blocks a ready one.
//   - lease (ZSET): Processing instances by lease deadline, for Rescue.
//   - done (ZSET): final instances by FinishedAt, for retention.
//   - k:<kind> (ZSET): instances of a kind by CreatedAt, for lookups.
//   - hist, logs (STREAM): history and log records; an entry's ID is its
//     record time in ms (kept monotonic), so a time range is an XRANGE.
//     An instance's record keeps its history entry IDs; l:<id> (LIST)
//     keeps its log entry IDs.
//   - uniq (HASH) and uniqx (ZSET): unique keys and their expiry.
//   - w:<queue>: the pub/sub channel scripts PUBLISH to when work may be
//     ready.
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
	Enqueue    = load("enqueue", false)
	Claim      = load("claim", false)
	Renew      = load("renew", false)
	Finish     = load("finish", false)
	Rescue     = load("rescue", false)
	Cancel     = load("cancel", false)
	AppendLogs = load("append_logs", false)
	OfInstance = load("of_instance", true)
	Range      = load("stream_range", true)
	Prune      = load("prune", false)
)

// All lists every script, for plugins that prepare them up front.
var All = []*Script{Enqueue, Claim, Renew, Finish, Rescue, Cancel, AppendLogs, OfInstance, Range, Prune}

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
