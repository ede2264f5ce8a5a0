-- enqueue: store new instances in state Scheduled.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, then per instance two values:
--       the instance ID and its record (F_* array; State, Seq, F_HIST and
--       F_HN are set here).
-- Returns one {code, id, seq} per instance: code 0 stored (seq assigned),
-- 1 duplicate unique key (id is the holder's), 2 an instance with this ID
-- exists already (seq is its Seq; nothing changes, so a retried Enqueue is
-- idempotent), 3 the existing record under this ID is corrupt, 4 the
-- record sent is not one.
-- Appends Created and Scheduled history records (one stream entry) for each
-- stored instance,
-- and PUBLISHes on the queue's wake-up channel.
local now, node = tonumber(ARGV[2]), ARGV[3]

local seen, seenq = {}, {}

local function one(id, raw)
	local r = decode(raw)
	if not r then
		return {4, id, 0}
	end
	local old = redis.call('HGET', K_INST, id)
	if old then
		local o = decode(old)
		if not o then
			return {3, id, 0}
		end
		return {2, id, o[F_SEQ]}
	end
	local ukey = r[F_UKEY]
	if ukey ~= '' then
		local holder = redis.call('HGET', K_UNIQ, ukey)
		if holder and holder ~= id then
			local h = load(holder)
			if h and h[F_UUNTIL] > now then
				return {1, holder, 0}
			end
		end
		redis.call('HSET', K_UNIQ, ukey, id)
		redis.call('ZADD', K_UNIQX, r[F_UUNTIL], ukey)
	end
	local seq = redis.call('HINCRBY', K_CTR, 'seq', 1)
	r[F_SEQ] = seq
	r[F_STATE] = S_SCHEDULED
	r[F_UPDATED] = now
	r[F_HIST] = ''
	r[F_HN] = 0
	hadd(id, r, {1, S_SCHEDULED}, 0, now, node, '', '')
	save(id, r)
	redis.call('ZADD', PREFIX .. 'k:' .. r[F_KIND], r[F_CREATED], id)
	if not seen[r[F_KIND]] then
		seen[r[F_KIND]] = true
		redis.call('SADD', K_KINDS, r[F_KIND])
	end
	if not seenq[r[F_QUEUE]] then
		seenq[r[F_QUEUE]] = true
		redis.call('SADD', K_QUEUES, r[F_QUEUE])
	end
	place(id, r, now)
	return {0, id, seq}
end

local out = {}
for i = 4, #ARGV, 2 do
	out[#out + 1] = one(ARGV[i], ARGV[i + 1])
end
return out
