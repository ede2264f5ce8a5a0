-- claim: move up to limit ready instances of a queue to Processing.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, [4] lease deadline (us),
--       [5] limit, [6] queue.
-- First moves instances that became due (scheduled set score <= now) into
-- the ready set, at most MOVE of them per call (the rest move on the next
-- calls, oldest RunAt first). Then pops ready members in order: priority
-- high to low, then RunAt, then Seq. Each claimed record gets State
-- Processing, Attempt+1, the lease, a Processing history record, and a
-- lease-set entry.
-- Returns {claimed, next, corrupt}: claimed is a flat list id1, record1,
-- id2, record2, ...; next is the earliest RunAt (us) still waiting in the
-- scheduled set when fewer than limit were claimed, else 0; corrupt lists
-- the IDs of queued instances whose record could not be decoded. Those are
-- claimed too (they count towards limit): the record is replaced by a
-- Processing attempt 1 under the caller's lease, with kind '', the queue,
-- the undecodable bytes kept as its args and an error saying so, so the
-- caller can finish it as Terminated and it never blocks the queue.
local now, owner, until_, limit, queue = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local MOVE = 1000
local rkey, skey = ready_key(queue), sched_key(queue)

local corrupt = {}
local due = redis.call('ZRANGEBYSCORE', skey, '-inf', num(now), 'LIMIT', 0, MOVE)
for _, id in ipairs(due) do
	redis.call('ZREM', skey, id)
	local r, why = load(id)
	if r and r[F_STATE] == S_SCHEDULED then
		redis.call('ZADD', rkey, -r[F_PRIO], ready_member(id, r))
	elseif why == 'corrupt' then
		redis.call('ZADD', rkey, 0, string.rep('\0', READY_HEAD) .. id)
	end
end

local claimed, n = {}, 0
local ERR = 'undecodable record (its bytes are kept as the args)'
local function take_corrupt(id)
	local raw = redis.call('HGET', K_INST, id)
	local r = {'', queue, raw, 0, now, S_PROCESSING, 1, 0, 0, '', 0, owner, until_,
		0, 0, now, now, 0, '', ERR, '', 0}
	hadd(id, r, {S_PROCESSING}, 1, now, owner, ERR, '')
	save(id, r)
	redis.call('ZADD', K_LEASE, until_, id)
	corrupt[#corrupt + 1] = id
	n = n + 1
end

local leases = {}
while n < limit do
	local members = redis.call('ZRANGE', rkey, 0, limit - n - 1)
	if #members == 0 then
		break
	end
	redis.call('ZREMRANGEBYRANK', rkey, 0, #members - 1)
	for _, m in ipairs(members) do
		local id = string.sub(m, READY_HEAD + 1)
		local r, why = load(id)
		if r and r[F_STATE] == S_SCHEDULED then
			r[F_STATE] = S_PROCESSING
			r[F_ATTEMPT] = r[F_ATTEMPT] + 1
			r[F_LOWNER] = owner
			r[F_LUNTIL] = until_
			r[F_CANCEL] = 0
			r[F_UPDATED] = now
			hadd(id, r, {S_PROCESSING}, r[F_ATTEMPT], now, owner, '', '')
			claimed[#claimed + 1] = id
			claimed[#claimed + 1] = save(id, r)
			leases[#leases + 1] = until_
			leases[#leases + 1] = id
			n = n + 1
		elseif why == 'corrupt' then
			take_corrupt(id)
		end
	end
end
-- One ZADD for the whole batch (in chunks that stay clear of Lua's limit
-- on unpacked arguments).
chunked('ZADD', K_LEASE, leases)

local next = 0
if n < limit then
	local head = redis.call('ZRANGE', skey, 0, 0, 'WITHSCORES')
	if head[2] then
		next = tonumber(head[2])
	end
end
return {claimed, next, corrupt}
