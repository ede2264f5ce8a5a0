-- lib.lua: helpers shared by every script. The Go side prepends this file
-- to each script, so every script sees the same KEYS layout, record layout
-- and helpers; none of it is a script on its own.
--
-- KEYS (the same ten for every script, all in one namespace and so all with
-- the namespace's one {hash tag}, one cluster slot):
--   KEYS[1]  inst    HASH   instance ID -> record (cmsgpack array, see F_*)
--   KEYS[2]  ctr     HASH   counters: seq (instance Seq), hms/hskew and
--                           lms/lskew (stream-ID clocks, see xadd_at)
--   KEYS[3]  hist    STREAM history records, entry ID ms = record time
--   KEYS[4]  lease   ZSET   Processing instance ID, score = lease deadline (us)
--   KEYS[5]  done    ZSET   final instance ID, score = FinishedAt (us)
--   KEYS[6]  uniq    HASH   unique key -> holding instance ID
--   KEYS[7]  uniqx   ZSET   unique key, score = UniqueUntil (us)
--   KEYS[8]  kinds   SET    every kind ever enqueued
--   KEYS[9]  queues  SET    every queue ever enqueued to
--   KEYS[10] logs    STREAM log records, entry ID ms = record time
-- ARGV[1] is always the namespace's key prefix, "jobkit:{ns}:". Scripts
-- build per-queue, per-kind and per-instance keys from it (q:<queue>:r,
-- q:<queue>:s, k:<kind>, l:<id>) and the wake-up channel w:<queue>. That is
-- safe on Redis Cluster because the prefix carries the namespace's hash tag:
-- every such key hashes to the slot of KEYS[1].
--
-- Times are integers in microseconds since the Unix epoch (exact in a Lua
-- number until the year 2255); 0 is the zero time.

local K_INST, K_CTR, K_HIST, K_LEASE, K_DONE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_UNIQ, K_UNIQX, K_KINDS, K_QUEUES, K_LOGS = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local PREFIX = ARGV[1]

-- Record fields (a cmsgpack array; the ID is the hash field, not stored).
local F_KIND, F_QUEUE, F_ARGS, F_PRIO, F_RUNAT, F_STATE, F_ATTEMPT = 1, 2, 3, 4, 5, 6, 7
local F_MAXR, F_TIMEOUT, F_UKEY, F_UUNTIL, F_LOWNER, F_LUNTIL = 8, 9, 10, 11, 12, 13
local F_CANCEL, F_SEQ, F_CREATED, F_UPDATED, F_FINISHED = 14, 15, 16, 17, 18
local F_RESULT, F_ERROR, F_HIST, F_HN = 19, 20, 21, 22
local NF = 22
-- The Lua type of each field; a record that does not match is corrupt.
local SCHEMA = {'string', 'string', 'string', 'number', 'number', 'number', 'number',
	'number', 'number', 'string', 'number', 'string', 'number',
	'number', 'number', 'number', 'number', 'number',
	'string', 'string', 'string', 'number'}

-- States, as store.State numbers them.
local S_SCHEDULED, S_PROCESSING, S_COMPLETED = 2, 3, 4
local S_TERMINATED, S_CANCELED = 5, 6

-- decode returns the record in raw, or nil when raw is not one.
local function decode(raw)
	local ok, r = pcall(cmsgpack.unpack, raw)
	if not ok or type(r) ~= 'table' or #r ~= NF then
		return nil
	end
	for i = 1, NF do
		if type(r[i]) ~= SCHEMA[i] then
			return nil
		end
	end
	return r
end

-- load returns the record of id; or nil, 'missing'; or nil, 'corrupt'.
local function load(id)
	local raw = redis.call('HGET', K_INST, id)
	if not raw then
		return nil, 'missing'
	end
	local r = decode(raw)
	if not r then
		return nil, 'corrupt'
	end
	return r
end

-- save stores r under id and returns its encoding.
local function save(id, r)
	local raw = cmsgpack.pack(r)
	redis.call('HSET', K_INST, id, raw)
	return raw
end

-- num formats an integer without an exponent (tostring would print 1.7e+15).
local function num(n)
	return string.format('%.0f', n)
end

-- be encodes the non-negative integer n as w big-endian bytes.
local function be(n, w)
	local b = {}
	if n < 0 then n = 0 end
	for i = w, 1, -1 do
		b[i] = n % 256
		n = math.floor(n / 256)
	end
	return string.char(unpack(b))
end

-- The ready set of a queue is ordered by score = -Priority, then (equal
-- scores compare members bytewise) by RunAt and Seq, which the member
-- starts with: 7 bytes of RunAt, 6 bytes of Seq, then the ID.
local READY_HEAD = 13
local function ready_member(id, r)
	return be(r[F_RUNAT], 7) .. be(r[F_SEQ], 6) .. id
end

local function ready_key(queue) return PREFIX .. 'q:' .. queue .. ':r' end
local function sched_key(queue) return PREFIX .. 'q:' .. queue .. ':s' end

local woken = {}
-- wake tells the queue's subscribers (once per script run) that work may
-- be ready earlier than they knew.
local function wake(queue)
	if not woken[queue] then
		woken[queue] = true
		redis.call('PUBLISH', PREFIX .. 'w:' .. queue, '1')
	end
end

-- place puts a Scheduled record in its queue: the ready set when due at
-- now, else the scheduled set (score RunAt, member ID). It wakes the queue.
local function place(id, r, now)
	if r[F_RUNAT] <= now then
		redis.call('ZADD', ready_key(r[F_QUEUE]), -r[F_PRIO], ready_member(id, r))
	else
		redis.call('ZADD', sched_key(r[F_QUEUE]), r[F_RUNAT], id)
	end
	wake(r[F_QUEUE])
end

-- unplace removes a Scheduled record from its queue.
local function unplace(id, r)
	redis.call('ZREM', ready_key(r[F_QUEUE]), ready_member(id, r))
	redis.call('ZREM', sched_key(r[F_QUEUE]), id)
end

-- xadd_at appends fields to stream key with an entry ID whose milliseconds
-- are the record time t (us), raised to the stream's last milliseconds when
-- a caller's clock is behind. ctr's skew field keeps the largest such
-- raise, so a time-range read knows how far past a bound to look: an
-- entry's ID is never before its time and at most skew after it. The clock
-- is read once per script run; it is written at once when it moves (at
-- most once per run, since a run has one now), so a failing script never
-- leaves it behind the stream.
local clocks = {}
local function xadd_at(key, msf, skewf, t, value)
	local c = clocks[msf]
	if not c then
		local v = redis.call('HMGET', K_CTR, msf, skewf)
		c = {ms = tonumber(v[1] or '0'), skew = tonumber(v[2] or '0')}
		clocks[msf] = c
	end
	local ms = math.floor(t / 1000)
	if ms < c.ms then
		if c.ms - ms > c.skew then
			c.skew = c.ms - ms
			redis.call('HSET', K_CTR, skewf, c.skew)
		end
		ms = c.ms
	elseif ms > c.ms then
		c.ms = ms
		redis.call('HSET', K_CTR, msf, ms)
	end
	return redis.call('XADD', key, num(ms) .. '-*', 'r', value)
end

-- hadd appends history records of r's transitions to the given states
-- (one entry; several records at one time share it, as Created and
-- Scheduled at enqueue do) and remembers the entry ID in the record
-- (F_HIST, space-separated). An entry's value is one cmsgpack array per
-- record: {id, kind, state, attempt, time, node, error, result, seq}.
local function hadd(id, r, states, attempt, t, node, err, result)
	local recs = {}
	for i, state in ipairs(states) do
		r[F_HN] = r[F_HN] + 1
		recs[i] = cmsgpack.pack({id, r[F_KIND], state, attempt, t, node, err, result, r[F_HN]})
	end
	local eid = xadd_at(K_HIST, 'hms', 'hskew', t, table.concat(recs))
	r[F_HIST] = r[F_HIST] .. eid .. ' '
end

-- Set updates a script batches: members to drop from the lease set and
-- (score, member) pairs to add to the done set. flush_sets applies them;
-- a script that calls finalize or clear_lease calls it before returning.
local lease_rm, done_add = {}, {}

local function chunked(cmd, key, args)
	for i = 1, #args, 1000 do
		redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
	end
end

local function flush_sets()
	chunked('ZREM', K_LEASE, lease_rm)
	chunked('ZADD', K_DONE, done_add)
	lease_rm, done_add = {}, {}
end

-- finalize moves r to a final state at now.
local function finalize(id, r, state, now)
	r[F_STATE] = state
	r[F_FINISHED] = now
	r[F_UPDATED] = now
	done_add[#done_add + 1] = now
	done_add[#done_add + 1] = id
end

-- clear_lease drops r's lease.
local function clear_lease(id, r)
	lease_rm[#lease_rm + 1] = id
	r[F_LOWNER] = ''
	r[F_LUNTIL] = 0
	r[F_CANCEL] = 0
end
