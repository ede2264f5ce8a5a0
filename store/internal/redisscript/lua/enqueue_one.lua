-- enqueue_one: store one instance, due at once and without a unique key,
-- in state Scheduled: what enqueue.lua does for a call of that one
-- instance (a lone ScheduleJob, the common case), writing the same keys
-- and values, without the tables a call of many instances, classes and
-- kind buckets needs (issue 39: Redis's own cost of a lone enqueue).
-- It starts itself (no begin_head: it needs none of its tables).
-- KEYS: inst (Keys.EnqueueOne; it names the namespace's slot). Every
--   other key it writes is in the namespace's one hash tag.
-- ARGV: [1] every value of the call, as consecutive MessagePack strings
--   (made by core_one.go's enqueueOneArgs): Redis's own cost of a call
--   grows by about a thousand instructions with each argument it is
--   given, and one cmsgpack.unpack of them costs less than that; the key
--   names come built, so the common path concatenates none:
--   1 the ID (EncodeID), 2 ctr, 3 hist, 4 now in ms (decimal),
--   5 the history entry's value (cmsgpack.pack('e', now, node, ID)),
--   6 the spec (the ten values of lib.lua's P_ schema after Seq) then
--     now packed (P_ENQ), 7 the spec's tail (P_LABELS, P_META, P_SHARD,
--     P_TASK as the spec keeps them; '' for none), 8 the kind bucket key
--     kb:<kind>:<sec>, 9 the bucket's part (the ID behind its length in
--     2 bytes), 10 sec (decimal), 11 kn:<kind>, 12 cnt, 13 the count's
--     field (count_field(S_SCHEDULED, queue, kind)), 14 the wake-up
--     channel w:<queue>, 15 the lane's ready list, 16 be(RunAt, 7),
--     17 the prefix, 18 kind, 19 queue, 20 priority (decimal), 21 the
--     lane's labels (as P_LABELS holds them; '' for none).
-- Numbers go to redis.call as text ('1'): Redis formats a Lua number
-- with snprintf, which costs about as much as a small command.
-- Returns the instance's Seq when it is stored, else {0, 0, code, 1, id,
-- seq}, as enqueue.lua for one instance (code 2: an instance with this ID
-- exists, seq is its Seq, nothing changes; 3: the record stored under
-- this ID is corrupt).
-- The first 16 are unpacked here; the last 5 (rest, their offset) only
-- by the paths that need them (Lua makes every string it is given anew,
-- hashing each of its bytes).
local rest, id, ctr, hist, now_ms, hval, spec_now, tail, kb, part, sec, kn, cnt, cfield, chan, ready, runat7 =
	cmsgpack.unpack_limit(ARGV[1], 16)
local _, prefix, kind, queue, prio, labels
local inst = KEYS[1]
local old = redis.call('HGET', inst, id)
if old then
	byte = string.byte
	local o = spec(old)
	if o then
		return {0, 0, 2, 1, id, o[P_SEQ]}
	end
	return {0, 0, 3, 1, id, 0}
end
local seq = redis.call('HINCRBY', ctr, 'seq', '1')

-- The history entry (its ID's ms are now's unless the stream is ahead).
local eid = redis.pcall('XADD', hist, now_ms .. '-*', 'r', hval)
if type(eid) ~= 'string' then
	if not prefix then _, prefix, kind, queue, prio, labels = cmsgpack.unpack_limit(ARGV[1], 5, rest) end
	PREFIX, K_CTR, floor = prefix, ctr, math.floor
	eid = xadd_at(hist, 'hskew', tonumber(now_ms) * 1000, hval, now_ms)
end
local dash = string.find(eid, '-', 1, true)
local ems, hdelta = string.sub(eid, 1, dash - 1), 0
if ems ~= now_ms then
	hdelta = tonumber(ems) - tonumber(now_ms)
end
redis.call('HSET', inst, id,
	cmsgpack.pack(seq) .. spec_now .. cmsgpack.pack(hdelta, tonumber(string.sub(eid, dash + 1))) .. tail)

-- Its kind's bucket of its CreatedAt second (a bucket this APPEND made
-- is new to the kind's directory, as in enqueue.lua).
if redis.call('APPEND', kb, part) == #part then
	if not prefix then _, prefix, kind, queue, prio, labels = cmsgpack.unpack_limit(ARGV[1], 5, rest) end
	redis.call('ZADD', prefix .. 'kd:' .. kind, sec, sec)
end
redis.call('HINCRBY', kn, sec, '1')

-- The count, and the kinds and queues sets when the count's field is new
-- (or back from zero), as enqueue.lua does; then the wake-up.
if redis.call('HINCRBY', cnt, cfield, '1') == 1 then
	if not prefix then _, prefix, kind, queue, prio, labels = cmsgpack.unpack_limit(ARGV[1], 5, rest) end
	redis.call('SADD', prefix .. 'kinds', kind)
	redis.call('SADD', prefix .. 'queues', queue)
end
redis.call('PUBLISH', chan, '1')

-- Its ready entry, in its place in its lane: at the back of the lane's
-- list unless it sorts before the list's tail (then push_one puts it in
-- the lane's ready set). Seq's 6 bytes are cut with arithmetic, not
-- be's math.floor calls.
local s, b6, b5, b4, b3, b2 = seq
b6 = s % 256; s = (s - b6) / 256
b5 = s % 256; s = (s - b5) / 256
b4 = s % 256; s = (s - b4) / 256
b3 = s % 256; s = (s - b3) / 256
b2 = s % 256; s = (s - b2) / 256
local entry = runat7 .. string.char(s % 256, b2, b3, b4, b5, b6) .. id
local last = redis.call('LINDEX', ready, -1)
if last then
	byte = string.byte
	if entry_before(entry, last) then
		if not prefix then _, prefix, kind, queue, prio, labels = cmsgpack.unpack_limit(ARGV[1], 5, rest) end
		PREFIX, floor, char = prefix, math.floor, string.char
		push_one(queue, tonumber(prio), lane_of(kind, labels), entry)
		return seq
	end
end
if redis.call('RPUSH', ready, entry) == 1 then
	-- A list this push started: the lane index entry and the head hint.
	if not prefix then _, prefix, kind, queue, prio, labels = cmsgpack.unpack_limit(ARGV[1], 5, rest) end
	PREFIX = prefix
	local p = tonumber(prio)
	local member = level_member(p, lane_of(kind, labels))
	redis.call('ZADD', levels_key(queue), -p, member)
	redis.call('HSET', heads_key(queue), member, string.sub(entry, 1, 13))
end
return seq
