-- lib.lua: helpers shared by every script. The Go side prepends this file
-- to each script, so every script sees the same KEYS layout, record layout
-- and helpers; none of it is a script on its own.
--
-- KEYS (the same twelve for every script but enqueue, which takes the
-- seven it uses, see enqueue.lua; all in one namespace and so all with
-- the namespace's one {hash tag}, one cluster slot):
--   KEYS[1]  inst    HASH   instance ID -> spec (see below), written once
--   KEYS[2]  st      HASH   instance ID -> state (see below); absent while
--                           the instance waits for its first attempt
--   KEYS[3]  ctr     HASH   counters: seq (instance Seq), hskew and lskew
--                           (how far stream IDs ran ahead, see xadd_at),
--                           (k:<kind>, a count of a kind's instances,
--                           only in a namespace written before issue 39:
--                           unlist drops it, nothing reads it)
--                           hsweep and hsweept (prune's sweep of history
--                           entries of removed instances: cursor, bound)
--   KEYS[4]  hist    STREAM history entries, one per script run that
--                           changed states; entry ID ms = the run's time
--   KEYS[5]  lease   ZSET   lease batches: member = the IDs given one lease
--                           deadline by one claim or renew (each ID preceded
--                           by its length, 2 bytes), score = that deadline
--                           (us). An ID's current deadline is in its state;
--                           a batch is only a pointer for Rescue, dropped
--                           once its deadline passed and Rescue read it.
--   KEYS[6]  run     SET    IDs of the Processing instances, for lookups
--                           by state (the lease batches also list IDs that
--                           finished since)
--   KEYS[7]  uniq    HASH   unique key -> holding instance ID
--   KEYS[8]  uniqx   ZSET   unique key, score = UniqueUntil (us)
--   KEYS[9]  kinds   SET    every kind ever enqueued
--   KEYS[10] queues  SET    every queue ever enqueued to
--   KEYS[11] logs    STREAM log records, entry ID ms = record time
--   KEYS[12] late    ZSET   final instances whose FinishedAt is before the
--                           tail of their state's done list (a caller's
--                           clock behind), score = FinishedAt (us)
-- ARGV[1] is always the namespace's key prefix, "jobkit:{ns}:". Scripts
-- build per-queue, per-kind and per-instance keys from it and the wake-up
-- channel w:<queue>:
--   q:<queue>:p          ZSET   the queue's non-empty lanes per priority:
--                               member <prio>/<lane>, score -prio (see
--                               lane_of; a member without '/' is a ready
--                               list written before lanes, which claim
--                               moves into lanes)
--   q:<queue>:r:<prio>/<lane>  LIST  ready instances of one priority and
--                               lane, in claim order (RunAt, then Seq):
--                               member RunAt (7 bytes), Seq (6 bytes),
--                               then ID; entries only ever go at its back
--                               (see flush_ready); a list written before
--                               issue 38 holds them in the order they
--                               became ready, nearly the same; the Seq
--                               tells an entry left by a canceled instance
--                               from a later instance that reused its ID
--   q:<queue>:r:<prio>/x<lane> ZSET  the lane's ready entries that sort
--                               before its list's tail when pushed (a RunAt
--                               already past at enqueue, an instance that
--                               fell due after later ones became ready, one
--                               rescued or handed back): the same members,
--                               score 0, so by their bytes; its lane index
--                               member is <prio>/x<lane>. Claims merge the
--                               lists and sets of the lanes of a priority
--                               by RunAt then Seq
--   q:<queue>:h          HASH   lane index member -> the RunAt and Seq (13
--                               bytes) of a ready entry at or before its
--                               list's (or set's) head (a hint: pops leave
--                               it behind; a push ahead of a set's head
--                               drops it), so a claim that merges lanes
--                               reads only the lists it takes from
--   paused               SET    the paused queues (queue_admin.lua)
--   q:<queue>:s          ZSET   instances waiting for RunAt (score RunAt,
--                               member Seq(6 bytes) Prio+2^31(4 bytes) ID)
--   kd:<kind>            ZSET   seconds (of CreatedAt) that have a bucket
--   kb:<kind>:<sec>      STRING IDs created in that second, each preceded
--                               by its length (2 bytes)
--   kn:<kind>            HASH   second -> live instances in its bucket
--   done:<state>         LIST   instances in final state <state> (4 to 7)
--                               in finishing order, member = FinishedAt
--                               (7 bytes) then ID: retention takes the
--                               oldest across the four, and a lookup by a
--                               final state reads only that state's list
--   l:<id>               LIST   log entry IDs of one instance
--   prog                 HASH   instance ID -> its reported progress
--                               (progress_set.lua), removed with it
--   no:<owner>           SET    IDs of the instances owner claimed and has
--                               not finished (per-owner index for
--                               nodes_rescue.lua; commit and clear_lease
--                               keep it; see nodes_*.lua for the registry)
--   cnt                  HASH   instances by state, queue and kind (see
--                               count_move): field = state digit, queue
--                               length (2 bytes), queue, kind
-- That is safe on Redis Cluster because the prefix carries the namespace's
-- hash tag: every such key hashes to the slot of KEYS[1].
--
-- Instance IDs are opaque bytes here (the Go side packs UUIDs into 17).
-- Times are integers in microseconds since the Unix epoch (exact in a Lua
-- number until the year 2255); 0 is the zero time.

-- What a call's KEYS and ARGV give, and every table a call fills, are set
-- by begin_head (and begin_changes below) at the start of each call: the
-- library is loaded once per server as Redis Functions, and its top level
-- runs once, so nothing here may hold a value of one call into the next.
local K_INST, K_ST, K_CTR, K_HIST, K_LEASE, K_RUN
local K_UNIQ, K_UNIQX, K_KINDS, K_QUEUES, K_LOGS, K_LATE
local PREFIX

-- States, as store.State numbers them.
local S_SCHEDULED, S_PROCESSING, S_COMPLETED = 2, 3, 4
local S_TERMINATED, S_CANCELED, S_TIMEDOUT = 5, 6, 7
-- FINALS are the final states, each with a done list.
local FINALS = {S_COMPLETED, S_TERMINATED, S_CANCELED, S_TIMEDOUT}
local function done_key(st) return PREFIX .. 'done:' .. st end
-- kind_count is the ctr field that counted the stored instances of kind
-- before issue 39 (see unlist).
local function kind_count(kind) return 'k:' .. kind end

-- The spec: what never changes after enqueue, as consecutive cmsgpack
-- values (not an array): Seq, which the enqueue script puts first, then
-- the ten values the Go side writes (kind to CreatedAt), then three the
-- enqueue script appends (its time and its history entry's ID). Only
-- rescue, cancel, retries and prune decode it; claim reads only its Seq.
local P_SEQ, P_KIND, P_QUEUE, P_ARGS, P_PRIO, P_RUNAT, P_MAXR = 1, 2, 3, 4, 5, 6, 7
local P_UKEY, P_UUNTIL, P_CREATED, P_ENQ, P_HDELTA, P_HSEQ = 9, 10, 11, 12, 13, 14
local NP = 14
-- P_LABELS, a 15th value only when the instance requires labels or
-- carries metadata: the labels, sorted, each behind a NUL byte
-- ('\0a\0b'; '' for none); enqueue appends it. P_META, a 16th value only
-- when the instance carries metadata: the Go side's packing of its pairs
-- (codec.go encodeMetadata), which the scripts never read. P_SHARD, a
-- 17th value only for a sharded task's parent or shard: the Go side's
-- packing of its parent, shard index and count (codec.go encodeShard),
-- which the scripts never read either; P_LABELS and P_META are then ''
-- when the instance has none. P_TASK, an 18th value only for a workflow
-- task: the Go side's JSON of its store.WorkflowTask (codec.go
-- encodeTask), never read by the scripts; P_SHARD is then '' when the
-- instance is not a shard.
local P_LABELS, P_META = 15, 16
local P_SCHEMA = {'number', 'string', 'string', 'string', 'number', 'number', 'number',
	'number', 'string', 'number', 'number', 'number', 'number', 'number', 'string', 'string', 'string', 'string'}

-- spec decodes raw, or returns nil when raw is missing or not a spec.
-- A spec without labels gets P_LABELS ''.
local function spec(raw)
	if not raw then
		return nil
	end
	local ok, p = pcall(function() return {cmsgpack.unpack(raw)} end)
	if not ok or #p < NP or #p > NP + 4 then
		return nil
	end
	for i = 1, #p do
		if type(p[i]) ~= P_SCHEMA[i] then
			return nil
		end
	end
	p[P_LABELS] = p[P_LABELS] or ''
	return p
end

-- The state: a cmsgpack array of what changes. T_REFS lists the history
-- entries with the instance's records after enqueue (space-separated IDs);
-- T_HN counts its history records (the enqueue entry holds the first two).
local T_STATE, T_ATT, T_RUNAT, T_OWNER, T_UNTIL, T_CANCEL = 1, 2, 3, 4, 5, 6
local T_UPD, T_FIN, T_RES, T_ERR, T_REFS, T_HN = 7, 8, 9, 10, 11, 12
local NT = 12
local T_SCHEMA = {'number', 'number', 'number', 'string', 'number', 'number',
	'number', 'number', 'string', 'string', 'string', 'number'}

-- state decodes raw, or returns nil when raw is not a state. Only the
-- fields the scripts compute with are type-checked; the rest are copied
-- through and the Go side checks them when it reads the state.
local T_CHECK = {T_STATE, T_ATT, T_RUNAT, T_OWNER, T_UNTIL, T_CANCEL, T_REFS, T_HN}
local function state(raw)
	local ok, t = pcall(cmsgpack.unpack, raw)
	if not ok or type(t) ~= 'table' or #t ~= NT then
		return nil
	end
	for _, i in ipairs(T_CHECK) do
		if type(t[i]) ~= T_SCHEMA[i] then
			return nil
		end
	end
	return t
end

-- state_of returns the State number at the head of a packed state without
-- decoding it (cmsgpack writes the 12-array header, then the State as one
-- byte), or nil.
local function state_of(raw)
	if string.byte(raw, 1) == 0x9c then
		return string.byte(raw, 2)
	end
	return nil
end

-- fresh is the state of an instance that has not run yet.
local function fresh(runat)
	return {S_SCHEDULED, 0, runat, '', 0, 0, 0, 0, '', '', '', 2}
end

-- num formats an integer without an exponent (tostring would print 1.7e+15).
-- Number formatting is among the dearest things a script does (a
-- string.format('%.0f') of a time in µs costs about as much as a Redis
-- call from Lua): '%d' is used for the integers a double holds exactly,
-- and the small ones (lengths, priorities, the seconds of a few buckets)
-- are formatted once per library load and kept in smallnum, which only
-- ever maps a number to its own digits.
-- wide_d tells whether '%d' formats 2^40 right (a C long of 64 bits;
-- set at the first num of a large number).
local smallnum, wide_d = {}, nil
local function num(n)
	if n % 1 ~= 0 or (n == 0 and 1 / n < 0) then -- a fraction, or -0 ('-0')
		return string.format('%.0f', n)
	end
	if n >= -1024 and n < 1024 then
		local s = smallnum[n]
		if not s then
			s = string.format('%d', n)
			smallnum[n] = s
		end
		return s
	end
	if wide_d == nil then
		wide_d = string.format('%d', 1099511627776) == '1099511627776'
	end
	if wide_d and n > -9007199254740992 and n < 9007199254740992 then
		return string.format('%d', n)
	end
	return string.format('%.0f', n)
end

-- div_pow10 returns the digits of floor(n / 10^k) for s, the decimal
-- digits of the integer n as the Go side formats it, without converting
-- a number to text (see num): those digits less the last k when n is at
-- least 10^k; nil for a smaller or negative n (the caller computes it).
local function div_pow10(s, k)
	if #s > k and string.byte(s, 1) ~= 45 then -- 45: '-'
		return string.sub(s, 1, -k - 1)
	end
	return nil
end

-- be encodes the non-negative integer n as w big-endian bytes; unbe
-- decodes w bytes of s from position i.
local floor, char -- math.floor, string.char (set by begin_head: a library's top level may not read them)
local function be(n, w)
	if n < 0 then n = 0 end
	-- The widths the layout uses, without a table (a claim or an enqueue
	-- encodes a few per instance).
	if w == 2 then
		return char(floor(n / 256) % 256, n % 256)
	elseif w == 6 then
		return char(floor(n / 1099511627776) % 256, floor(n / 4294967296) % 256, floor(n / 16777216) % 256,
			floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
	elseif w == 7 then
		return char(floor(n / 281474976710656) % 256, floor(n / 1099511627776) % 256, floor(n / 4294967296) % 256,
			floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
	end
	local b = {}
	for i = w, 1, -1 do
		b[i] = n % 256
		n = math.floor(n / 256)
	end
	return string.char(unpack(b))
end
-- byte_strings returns the table of the 256 one-byte strings, indexed by
-- their byte (0-255), made at the first call that needs it (a library's
-- top level may not call string.char) and kept: it only ever maps a byte
-- to its own string.
local onebyte
local function byte_strings()
	if not onebyte then
		local t = {}
		for b = 0, 255 do
			t[b] = string.char(b)
		end
		onebyte = t
	end
	return onebyte
end
local byte -- string.byte (set by begin_head)
local function unbe(s, i, w)
	if w == 7 then -- RunAt: one call for the 7 bytes
		local a, b, c, d, e, f, g = byte(s, i, i + 6)
		return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256) + g
	elseif w == 6 then -- Seq
		local a, b, c, d, e, f = byte(s, i, i + 5)
		return (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256) + f
	end
	local n = 0
	for j = i, i + w - 1 do
		n = n * 256 + byte(s, j)
	end
	return n
end

-- chunked sends cmd key args in calls of at most 1,000 arguments and
-- returns the last call's reply (nil when args is empty).
local function chunked(cmd, key, args)
	local r
	for i = 1, #args, 1000 do
		r = redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
	end
	return r
end

-- argv_ids returns ARGV[first], ARGV[first + stride], ...: the IDs of a
-- script's per-instance argument groups.
local function argv_ids(first, stride)
	local ids = {}
	for i = first, #ARGV, stride do
		ids[#ids + 1] = ARGV[i]
	end
	return ids
end

-- hmget returns the values of fields in hash key (false for missing), in
-- chunks that stay clear of Lua's limit on unpacked arguments.
local function hmget(key, fields)
	local out = {}
	for i = 1, #fields, 1000 do
		local v = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
		for j = 1, #v do
			out[i + j - 1] = v[j]
		end
	end
	return out
end

-- ID lists (lease batches, kind buckets) hold each ID behind its length
-- in 2 bytes.
local function idlist(ids)
	local parts = {}
	for i, id in ipairs(ids) do
		parts[i] = be(#id, 2) .. id
	end
	return table.concat(parts)
end
local function split_ids(s)
	local out, i = {}, 1
	while i + 1 <= #s do
		local n = unbe(s, i, 2)
		out[#out + 1] = string.sub(s, i + 2, i + 1 + n)
		i = i + 2 + n
	end
	return out
end

-- ---- queues ----

local PRIO_BIAS = 2147483648
local SCHED_HEAD = 10
local READY_HEAD = 13
local LEGACY_READY_HEAD = 6 -- entries of a ready list written before lanes
local function levels_key(queue) return PREFIX .. 'q:' .. queue .. ':p' end

-- A lane is a kind with the labels its instances require: the kind's
-- length, ':', the kind, then the labels as spec's P_LABELS has them. A
-- claim takes from the lanes whose kind the claimer runs and whose label
-- requirements (store.LabelRequirement, compact forms) its labels satisfy.
local function lane_of(kind, labels)
	return num(#kind) .. ':' .. kind .. labels
end
-- lane_parts returns the kind and the labels (a list) of lane.
local function lane_parts(lane)
	local c = string.find(lane, ':', 1, true)
	local n = tonumber(string.sub(lane, 1, c - 1))
	local kind = string.sub(lane, c + 1, c + n)
	local labels = {}
	for l in string.gmatch(string.sub(lane, c + n + 1), '%z([^%z]+)') do
		labels[#labels + 1] = l
	end
	return kind, labels
end
local function level_member(prio, lane) return num(prio) .. '/' .. lane end
-- SET_MARK starts the lane part of the lane index member of a lane's
-- ready set (see flush_ready): "<prio>/x<lane>". A lane starts with a
-- digit, so a member tells the two apart.
local SET_MARK = 120 -- 'x'
local function set_member(prio, lane) return num(prio) .. '/x' .. lane end
-- is_set tells whether lane index member m (with a '/' at slash) names a
-- ready set rather than a ready list.
local function is_set(m, slash)
	return string.byte(m, slash + 1) == SET_MARK
end
local function heads_key(queue) return PREFIX .. 'q:' .. queue .. ':h' end
local function ready_key(queue, member) return PREFIX .. 'q:' .. queue .. ':r:' .. member end
local function sched_key(queue) return PREFIX .. 'q:' .. queue .. ':s' end
local function sched_member(id, seq, prio)
	return be(seq, 6) .. be(prio + PRIO_BIAS, 4) .. id
end

local woken
-- wake tells the queue's subscribers (once per script run) that work may
-- be ready earlier than they knew.
local function wake(queue)
	if not woken[queue] then
		woken[queue] = true
		redis.call('PUBLISH', PREFIX .. 'w:' .. queue, '1')
	end
end

-- Ready-list pushes are gathered per lane and written by flush_ready,
-- which puts each entry in its place by RunAt, then Seq.
local pushes, push_lists
-- pushes_of returns the gathering of the ready entries of (queue, prio,
-- lane): back (the entries, in any order).
local function pushes_of(queue, prio, lane)
	local member = level_member(prio, lane)
	local key = ready_key(queue, member)
	local p = pushes[key]
	if not p then
		p = {queue = queue, prio = prio, lane = lane, member = member, back = {}}
		pushes[key] = p
		push_lists[#push_lists + 1] = key
	end
	return p
end

-- push_ready gathers a ready entry. An instance put back (front: rescued
-- or handed back) or one that fell due in the scheduled set goes by its
-- RunAt like any other: ahead of what became due after it. runat7, when
-- given, is be(runat, 7) made by the caller.
local function push_ready(id, queue, prio, front, runat, seq, lane, runat7)
	local back = pushes_of(queue, prio, lane).back
	back[#back + 1] = (runat7 or be(runat, 7)) .. be(seq, 6) .. id
end

-- push_due gathers an instance that was waiting in the scheduled set and
-- is due now: it became ready at its RunAt, which may be before entries
-- pushed since (claims move such instances only when they run), so
-- flush_ready puts it ahead of those.
local function push_due(id, queue, prio, runat, seq, lane)
	push_ready(id, queue, prio, false, runat, seq, lane)
end

-- ready_back returns the list of entries to push at the back of the
-- ready list of (queue, prio, lane), as push_ready gathers them, for a
-- caller that appends many at once.
local function ready_back(queue, prio, lane)
	return pushes_of(queue, prio, lane).back
end

-- entry_before tells whether ready entry a sorts before b: by RunAt, then
-- Seq (the first 13 bytes; never compared as strings, which Lua does by
-- the server's locale).
local function entry_before(a, b)
	local ra, rb = unbe(a, 1, 7), unbe(b, 1, 7)
	if ra ~= rb then
		return ra < rb
	end
	return unbe(a, 8, 6) < unbe(b, 8, 6)
end

-- flush_ready writes the gathered pushes, keeping each lane's ready
-- entries in claim order (RunAt, then Seq). A lane's list holds entries in
-- that order: the pushed entries that sort at or after its tail (all of
-- them, usually: an enqueue's RunAt is its caller's now) are appended;
-- those that sort before its tail (a RunAt already past at enqueue, an
-- instance that fell due in the scheduled set after later ones became
-- ready, one rescued or handed back) go to the lane's set (SET_MARK in
-- its member; score 0, so members sort by their bytes: RunAt, Seq, ID),
-- and claims merge the list and the set. It returns the set of queues
-- that had a ready list or set pushed to which was empty before (nil if
-- none).
local function flush_ready()
	local filled
	for _, key in ipairs(push_lists) do
		local p = pushes[key]
		local all, sorted = p.back, true
		-- Most calls push in order already (checked in one pass).
		for i = 2, #all do
			if entry_before(all[i], all[i - 1]) then
				sorted = false
				break
			end
		end
		if not sorted then
			table.sort(all, entry_before)
		end
		-- low: how many sort before the list's tail (a prefix of all).
		local low = 0
		local tail = redis.call('LINDEX', key, -1)
		if tail and entry_before(all[1], tail) then
			local lo, hi = 1, #all -- all[lo] is before tail; find the last such
			while lo < hi do
				local mid = floor((lo + hi + 1) / 2)
				if entry_before(all[mid], tail) then lo = mid else hi = mid - 1 end
			end
			low = lo
		end
		if low > 0 then
			local smember = set_member(p.prio, p.lane)
			local zargs = {}
			for i = 1, low do
				zargs[2 * i - 1], zargs[2 * i] = 0, all[i]
			end
			chunked('ZADD', ready_key(p.queue, smember), zargs)
			if redis.call('ZADD', levels_key(p.queue), -p.prio, smember) == 1 then
				filled = filled or {}
				filled[p.queue] = true
			end
			-- Its head may have moved ahead of its hint: read when next merged.
			redis.call('HDEL', heads_key(p.queue), smember)
		end
		if low < #all then
			local back = all
			if low > 0 then
				back = {}
				for i = low + 1, #all do back[i - low] = all[i] end
			end
			local len = chunked('RPUSH', key, back)
			-- A list that held entries before is in the lane index already
			-- (claim drops a lane's member only with its list emptied, in
			-- the same script), and its head hint, if any, is at or before
			-- its head, which appends do not move: only a list these
			-- pushes started needs the index entry and the hint.
			if len == #back then
				redis.call('ZADD', levels_key(p.queue), -p.prio, p.member)
				redis.call('HSET', heads_key(p.queue), p.member, string.sub(back[1], 1, 13))
				filled = filled or {}
				filled[p.queue] = true
			end
		end
	end
	pushes, push_lists = {}, {}
	return filled
end

-- push_one writes one ready entry of (queue, prio, lane) as flush_ready
-- writes a gathering of one, without the gathering: at the back of the
-- lane's list, or in the lane's ready set when it sorts before the list's
-- tail (a clock behind another's). For a script that pushes one entry
-- and nothing else (enqueue_one).
local function push_one(queue, prio, lane, entry)
	local member = level_member(prio, lane)
	local key = ready_key(queue, member)
	local tail = redis.call('LINDEX', key, -1)
	if tail and entry_before(entry, tail) then
		local smember = set_member(prio, lane)
		redis.call('ZADD', ready_key(queue, smember), 0, entry)
		redis.call('ZADD', levels_key(queue), -prio, smember)
		redis.call('HDEL', heads_key(queue), smember)
		return
	end
	-- Only a list this push started needs the lane index entry and the
	-- head hint (see flush_ready).
	if redis.call('RPUSH', key, entry) == 1 then
		redis.call('ZADD', levels_key(queue), -prio, member)
		redis.call('HSET', heads_key(queue), member, string.sub(entry, 1, 13))
	end
end

-- place puts a Scheduled instance in its queue: its lane's ready list when due at
-- now (at the front when front is true, so it keeps its place), else the
-- scheduled set. It wakes the queue. flush_ready must run before the
-- script returns.
local function place(id, queue, prio, seq, runat, now, front, lane)
	if runat <= now then
		push_ready(id, queue, prio, front, runat, seq, lane)
	else
		redis.call('ZADD', sched_key(queue), runat, sched_member(id, seq, prio))
	end
	wake(queue)
end

-- ---- counters (inspect) ----

-- Every transition counts itself through count_move, in the script that
-- makes it; commit (and enqueue and prune, which do not commit) write the
-- run's deltas with one HINCRBY per changed field, so the counts change
-- in the same atomic step as the states they count.
local K_CNT
local cnt_delta

-- spec_qk returns the queue and kind of the spec raw (reading only its
-- first three values), or nil.
local function spec_qk(raw)
	local ok, _, _, kind, queue = pcall(cmsgpack.unpack_limit, raw, 3)
	if ok and type(kind) == 'string' and type(queue) == 'string' then
		return queue, kind
	end
	return nil
end

-- count_field is the cnt field of (queue, kind) in state st.
local function count_field(st, queue, kind)
	return num(st) .. be(#queue, 2) .. queue .. kind
end

-- count_add adds d to the count of (queue, kind) in state st.
local function count_add(queue, kind, st, d)
	local f = count_field(st, queue, kind)
	cnt_delta[f] = (cnt_delta[f] or 0) + d
end

-- count_move counts instance id (its spec raw, or nil to read it) out of
-- state from (nil: a new instance) and into state to (nil: removed).
local function count_move(id, raw, from, to)
	if from == to then
		return
	end
	raw = raw or redis.call('HGET', K_INST, id)
	local queue, kind
	if raw then
		queue, kind = spec_qk(raw)
	end
	if not queue then
		return -- an undecodable spec is not counted
	end
	if from then
		count_add(queue, kind, from, -1)
	end
	if to then
		count_add(queue, kind, to, 1)
	end
end

-- flush_counts writes the run's count deltas.
local function flush_counts()
	for f, d in pairs(cnt_delta) do
		if d ~= 0 then
			redis.call('HINCRBY', K_CNT, f, d)
		end
	end
	cnt_delta = {}
end

-- ---- history ----

-- xadd_at appends value to stream key with an entry ID whose milliseconds
-- are t (us), raised to the stream's last milliseconds when a caller's
-- clock is behind. ctr's skew field keeps the largest such raise, so a
-- time-range read knows how far past a bound to look: an entry's ID is
-- never before its time and at most skew after it. The common case is one
-- XADD; only a clock behind the stream costs the reads and writes of the
-- raise.
-- tms, when given, is floor(t / 1000) in decimal (see div_pow10).
local function xadd_at(key, skewf, t, value, tms)
	local ms = math.floor(t / 1000)
	local eid = redis.pcall('XADD', key, (tms or num(ms)) .. '-*', 'r', value)
	if type(eid) == 'string' then
		return eid
	end
	-- Behind the stream's last ID (its entry may have been deleted since):
	-- take its milliseconds.
	local info = redis.call('XINFO', 'STREAM', key)
	local lms = 0
	for i = 1, #info, 2 do
		if info[i] == 'last-generated-id' then
			lms = tonumber(string.match(info[i + 1], '^(%d+)'))
		end
	end
	local skew = tonumber(redis.call('HGET', K_CTR, skewf) or '0')
	if lms - ms > skew then
		redis.call('HSET', K_CTR, skewf, lms - ms)
	end
	return redis.call('XADD', key, num(lms) .. '-*', 'r', value)
end

-- begin_head starts a call: its keys, its prefix, and empty gatherings.
local function begin_head()
	K_INST, K_ST, K_CTR, K_HIST, K_LEASE, K_RUN = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
	K_UNIQ, K_UNIQX, K_KINDS, K_QUEUES, K_LOGS, K_LATE = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
	PREFIX = ARGV[1]
	floor, char, byte = math.floor, string.char, string.byte
	woken = {}
	pushes, push_lists = {}, {}
	K_CNT = PREFIX .. 'cnt'
	cnt_delta = {}
end

-- ---- state changes ----
-- Enqueue, which only adds instances, is built without what follows (see
-- scripts.go): Redis runs a script's top level on every call.

-- A script run's state changes are gathered and written by commit: one
-- history entry for the run (value: cmsgpack 't', now, node, then one
-- array {id, state, attempt, error, result, seq} per record), and one HSET
-- of every changed state, each with that entry's ID added to its refs.
local recs, changed, changed_ids

-- change records t as id's new state; with hstate it also adds a history
-- record of the transition to hstate.
local function change(id, t, hstate, err, result)
	if not changed[id] then
		changed_ids[#changed_ids + 1] = id
	end
	changed[id] = t
	if hstate then
		t[T_HN] = t[T_HN] + 1
		recs[#recs + 1] = cmsgpack.pack({id, hstate, t[T_ATT], err or '', result or '', t[T_HN]})
		t.hist = true
	end
end

-- First claims: an instance claimed for the first time gets a state that
-- is the same for every such instance of a run (Processing, attempt 1,
-- the run's owner, deadline and time, its history entry, 3 records), so
-- it is packed once per run and its history record is built from packed
-- parts, with no table per instance.
local firsts, first_suffix
local function claim_first(id)
	if not first_suffix then
		first_suffix = cmsgpack.pack(S_PROCESSING, 1, '', '', 3)
	end
	firsts[#firsts + 1] = id
	recs[#recs + 1] = '\150' .. cmsgpack.pack(id) .. first_suffix -- 0x96: an array of 6
end

-- Set updates gathered for commit: the IDs given a lease (all until the
-- run's one deadline), the IDs that reached a final state (all at the
-- run's one now; per state), and the IDs that started or stopped running.
local lease_ids, lease_until, done_by
local run_add, run_rem
-- own_rem: per owner, the IDs whose lease clear_lease dropped (no:<owner>).
local own_rem

-- lease records that id's lease now ends at until (one deadline per run).
local function lease(id, until_)
	lease_ids[#lease_ids + 1] = id
	lease_until = until_
end

-- started records that id was claimed: it runs until clear_lease.
local function started(id, until_)
	lease(id, until_)
	run_add[#run_add + 1] = id
end

-- flush_done appends the run's final instances to their state's done
-- list, or to the late set when that list's tail finished after now.
local function flush_done(now)
	local head
	for _, st in ipairs(FINALS) do
		local ids = done_by[st]
		if ids then
			head = head or be(now, 7)
			local key = done_key(st)
			local tail = redis.call('LINDEX', key, -1)
			if not tail or unbe(tail, 1, 7) <= now then
				local ms = {}
				for i, id in ipairs(ids) do
					ms[i] = head .. id
				end
				chunked('RPUSH', key, ms)
			else
				local zs = {}
				for _, id in ipairs(ids) do
					zs[#zs + 1] = now
					zs[#zs + 1] = id
				end
				chunked('ZADD', K_LATE, zs)
			end
		end
	end
end

-- triples flattens {id, spec} pairs into id, spec, state, ... with each
-- ID's packed state from commit.
local function triples(list, packed)
	local out = {}
	for _, c in ipairs(list) do
		out[#out + 1] = c[1]
		out[#out + 1] = c[2]
		out[#out + 1] = packed[c[1]]
	end
	return out
end

-- commit writes what the run gathered and returns each changed ID's
-- packed state. owner and until are those of the run's first claims.
local function commit(now, node, owner, until_)
	local eid, packed
	if #recs > 0 then
		eid = xadd_at(K_HIST, 'hskew', now, cmsgpack.pack('t', now, node) .. table.concat(recs))
	end
	local pairs_ = {}
	packed = {}
	for _, id in ipairs(changed_ids) do
		local t = changed[id]
		if t.hist then
			t.hist = nil
			t[T_REFS] = t[T_REFS] .. eid .. ' '
		end
		local raw = cmsgpack.pack(t)
		packed[id] = raw
		pairs_[#pairs_ + 1] = id
		pairs_[#pairs_ + 1] = raw
	end
	if #firsts > 0 then
		local raw = cmsgpack.pack({S_PROCESSING, 1, 0, owner, until_, 0, now, 0, '', '', eid .. ' ', 3})
		for _, id in ipairs(firsts) do
			packed[id] = raw
			pairs_[#pairs_ + 1] = id
			pairs_[#pairs_ + 1] = raw
		end
	end
	chunked('HSET', K_ST, pairs_)
	for i = 1, #lease_ids, 1000 do
		redis.call('ZADD', K_LEASE, lease_until, idlist({unpack(lease_ids, i, math.min(i + 999, #lease_ids))}))
	end
	flush_done(now)
	flush_ready()
	flush_counts()
	recs, changed, changed_ids, firsts = {}, {}, {}, {}
	chunked('SADD', K_RUN, run_add)
	chunked('SREM', K_RUN, run_rem)
	-- nodes: the per-owner index of running attempts (claims carry owner).
	if owner and #run_add > 0 then
		chunked('SADD', PREFIX .. 'no:' .. owner, run_add)
	end
	for o, ids in pairs(own_rem) do
		chunked('SREM', PREFIX .. 'no:' .. o, ids)
	end
	own_rem = {}
	lease_ids, done_by, run_add, run_rem = {}, {}, {}, {}
	return packed
end

-- finalize moves t to a final state at now.
local function finalize(id, t, st, now)
	t[T_STATE] = st
	t[T_FIN] = now
	t[T_UPD] = now
	local ids = done_by[st]
	if not ids then
		ids = {}
		done_by[st] = ids
	end
	ids[#ids + 1] = id
end

-- clear_lease drops the lease of id, whose state is t: it no longer
-- runs. Its lease batch stays until Rescue reads it after its deadline.
local function clear_lease(id, t)
	if t[T_OWNER] ~= '' then
		local l = own_rem[t[T_OWNER]]
		if not l then
			l = {}
			own_rem[t[T_OWNER]] = l
		end
		l[#l + 1] = id
	end
	t[T_OWNER] = ''
	t[T_UNTIL] = 0
	t[T_CANCEL] = 0
	run_rem[#run_rem + 1] = id
end

-- unlisted holds the kinds unlist saw in this call.
local unlisted
-- unlist takes a removed instance (id, its spec p) out of its kind's count,
-- its kind's creation bucket (dropping an emptied bucket) and the unique
-- key it holds: what prune and admin delete both undo of an enqueue.
local function unlist(id, p)
	-- A namespace written before issue 39 counted each kind's instances
	-- in ctr's k:<kind>; nothing reads those counts now: the first
	-- removal of a kind in a call drops its field.
	if not unlisted[p[P_KIND]] then
		unlisted[p[P_KIND]] = true
		redis.call('HDEL', K_CTR, kind_count(p[P_KIND]))
	end
	local sec = num(math.floor(p[P_CREATED] / 1000000))
	local nkey = PREFIX .. 'kn:' .. p[P_KIND]
	if redis.call('HINCRBY', nkey, sec, -1) <= 0 then
		redis.call('HDEL', nkey, sec)
		redis.call('DEL', PREFIX .. 'kb:' .. p[P_KIND] .. ':' .. sec)
		redis.call('ZREM', PREFIX .. 'kd:' .. p[P_KIND], sec)
	end
	if p[P_UKEY] ~= '' and redis.call('HGET', K_UNIQ, p[P_UKEY]) == id then
		redis.call('HDEL', K_UNIQ, p[P_UKEY])
		redis.call('ZREM', K_UNIQX, p[P_UKEY])
	end
end

-- rescue_move takes back id, a Processing attempt whose owner is gone
-- (its lease expired, or its node was declared dead), whose state is t:
-- to Canceled when its cancel flag is set (its owner never saw the
-- request), to Terminated when Attempt > MaxRetries or its spec is
-- damaged, else to Scheduled at the front of its lane's ready list,
-- keeping RunAt and its place (the attempt stays counted). msg is the
-- history record's error. It returns the instance's raw spec.
local function rescue_move(id, t, msg, now)
	local craw = redis.call('HGET', K_INST, id)
	local p = spec(craw)
	local to = S_SCHEDULED
	if t[T_CANCEL] ~= 0 then
		to = S_CANCELED
	elseif not p or (p[P_MAXR] >= 0 and t[T_ATT] > p[P_MAXR]) then
		to = S_TERMINATED
	end
	count_move(id, craw, S_PROCESSING, to)
	clear_lease(id, t)
	t[T_ERR] = msg
	t[T_UPD] = now
	change(id, t, to, msg, '')
	if to ~= S_SCHEDULED then
		finalize(id, t, to, now)
	else
		t[T_STATE] = S_SCHEDULED
		local runat = t[T_RUNAT]
		if runat == 0 then
			runat = p[P_RUNAT]
		end
		place(id, p[P_QUEUE], p[P_PRIO], p[P_SEQ], runat, now, true, lane_of(p[P_KIND], p[P_LABELS]))
	end
	return craw
end

-- begin_changes empties the state changes' gatherings at the start of a
-- call (after begin_head).
local function begin_changes()
	unlisted = {}
	recs, changed, changed_ids = {}, {}, {}
	firsts, first_suffix = {}, nil
	lease_ids, lease_until, done_by = {}, 0, {}
	run_add, run_rem = {}, {}
	own_rem = {}
end
