-- enqueue_one: store one instance, due at once and without a unique key,
-- in state Scheduled: what enqueue.lua does for a call of that one
-- instance (a lone ScheduleJob, the common case), writing the same keys
-- and values, from a dozen arguments and without the tables a call of
-- many instances, classes and kind buckets needs (issue 39: Redis's own
-- cost of a lone enqueue).
-- KEYS: inst, ctr, hist (Keys.EnqueueOne). Every other key it writes is
--   built from the prefix, in the namespace's one hash tag.
-- ARGV: (made by core_one.go's EnqueueOneArgs)
--   [1] prefix, [2] now (us),
--   [3] the history entry's value: cmsgpack.pack('e', now, node), then
--       the ID as cmsgpack packs it (the Go side writes those bytes),
--   [4] the ID, [5] its spec (the ten values the Go side writes, see
--   lib.lua), [6] the spec's tail (P_LABELS, P_META, P_SHARD, P_TASK as
--   the spec keeps them; '' for none), [7] be(RunAt, 7), [8] kind,
--   [9] queue, [10] priority (decimal), [11] labels (as P_LABELS holds
--   them; '' for none), [12] the second of CreatedAt (decimal), [13] the
--   kind bucket's part: the ID behind its length in 2 bytes.
-- Numbers go to redis.call as text ('1'): Redis formats a Lua number
-- with snprintf, which costs about as much as a small command.
-- Returns what enqueue.lua returns for one instance: {1, seq} when it is
-- stored, else {0, 0, code, 1, id, seq} (code 2: an instance with this
-- ID exists, seq is its Seq, nothing changes; 3: the record stored under
-- this ID is corrupt).
-- begin_head took the twelve keys' places: the three are set here, the
-- others are nil (this script touches none of them).
K_INST, K_ST, K_CTR, K_HIST, K_LEASE, K_RUN = KEYS[1], nil, KEYS[2], KEYS[3], nil, nil
K_UNIQ, K_UNIQX, K_KINDS, K_QUEUES, K_LOGS, K_LATE = nil, nil, nil, nil, nil, nil
local id = ARGV[4]
local old = redis.call('HGET', K_INST, id)
if old then
	local o = spec(old)
	if o then
		return {0, 0, 2, 1, id, o[P_SEQ]}
	end
	return {0, 0, 3, 1, id, 0}
end
local now = tonumber(ARGV[2])
local seq = redis.call('HINCRBY', K_CTR, 'seq', '1')

-- The history entry (its ID's ms are now's unless the stream is ahead).
local now_ms = div_pow10(ARGV[2], 3)
local eid = xadd_at(K_HIST, 'hskew', now, ARGV[3], now_ms)
local dash = string.find(eid, '-', 1, true)
local ems, hdelta = string.sub(eid, 1, dash - 1), 0
if ems ~= now_ms then
	hdelta = tonumber(ems) - floor(now / 1000)
end
redis.call('HSET', K_INST, id,
	cmsgpack.pack(seq) .. ARGV[5] .. cmsgpack.pack(now, hdelta, tonumber(string.sub(eid, dash + 1))) .. ARGV[6])

-- Its kind's bucket of its CreatedAt second (a bucket this APPEND made
-- is new to the kind's directory, as in enqueue.lua).
local kind, queue, sec, part = ARGV[8], ARGV[9], ARGV[12], ARGV[13]
if redis.call('APPEND', PREFIX .. 'kb:' .. kind .. ':' .. sec, part) == #part then
	redis.call('ZADD', PREFIX .. 'kd:' .. kind, sec, sec)
end
redis.call('HINCRBY', PREFIX .. 'kn:' .. kind, sec, '1')

-- The count, and the kinds and queues sets when the count's field is new
-- (or back from zero), as enqueue.lua does; then the wake-up.
if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, queue, kind), '1') == 1 then
	redis.call('SADD', PREFIX .. 'kinds', kind)
	redis.call('SADD', PREFIX .. 'queues', queue)
end
wake(queue)

-- Its ready entry, in its place in its lane.
local prio = tonumber(ARGV[10])
push_one(queue, prio, lane_of(kind, ARGV[11]), ARGV[7] .. be(seq, 6) .. id)
return {1, seq}
