-- rescue: take back attempts whose lease ended.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] limit.
-- Reads the lease batches whose deadline is before now, oldest first and
-- at most SCAN per call, and takes back up to limit of the instances they
-- list that are still Processing with a lease (as their state says) that
-- ended before now. Each goes back to Scheduled at the front of its ready
-- list, keeping its RunAt and its place (the attempt stays counted), or to
-- Terminated when Attempt > MaxRetries (MaxRetries < 0 retries forever),
-- or to Canceled when its cancel flag is set (its owner never saw the
-- request), with a history record whose error says the lease expired. One whose
-- spec is damaged is Terminated. A batch is dropped once read; the IDs of
-- a batch left when limit is reached are put back under its deadline.
-- Finished, renewed, missing and damaged entries are simply dropped.
-- Returns a flat list id1, spec1, state1, id2, ... of the moved instances
-- in their new state. PUBLISHes on the channels of queues it refilled.
local now, node, limit = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local SCAN = 1000
local moved, n = {}, 0

local function take(id, t)
	local craw = rescue_move(id, t, 'lease of ' .. t[T_OWNER] .. ' expired', now)
	moved[#moved + 1] = {id, craw or ''}
	n = n + 1
end

local batches = redis.call('ZRANGEBYSCORE', K_LEASE, '-inf', '(' .. num(now), 'WITHSCORES', 'LIMIT', 0, SCAN)
for b = 1, #batches, 2 do
	if n >= limit then
		break
	end
	local member, score = batches[b], batches[b + 1]
	redis.call('ZREM', K_LEASE, member)
	local ids = split_ids(member)
	if #ids > 0 then
		local raws = redis.call('HMGET', K_ST, unpack(ids))
		local rest = {}
		for j, id in ipairs(ids) do
			local raw = raws[j]
			if raw and state_of(raw) == S_PROCESSING then
				if n >= limit then
					rest[#rest + 1] = id
				else
					local t = changed[id] or state(raw)
					if t and t[T_STATE] == S_PROCESSING and t[T_UNTIL] < now then
						take(id, t)
					end
				end
			end
		end
		if #rest > 0 then
			-- GT: a renew may have written this very member (the same IDs)
			-- with a later deadline; never move it back.
			redis.call('ZADD', K_LEASE, 'GT', score, idlist(rest))
		end
	end
end
return triples(moved, commit(now, node))
