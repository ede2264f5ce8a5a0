-- rescue: take back attempts whose lease ended.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] limit.
-- Takes up to limit lease-set entries with a deadline before now. Each
-- Processing record goes back to Scheduled keeping its RunAt, so it keeps
-- its place in the queue (the attempt stays counted), or to Terminated when Attempt > MaxRetries (MaxRetries
-- < 0 retries forever), with a history record whose error says the lease
-- expired. Stale entries (no longer Processing, missing, corrupt) are
-- dropped from the lease set.
-- Returns a flat list id1, record1, id2, record2, ... of the moved records
-- in their new state. PUBLISHes on the channels of queues it refilled.
local now, node, limit = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local out = {}
local ids = redis.call('ZRANGEBYSCORE', K_LEASE, '-inf', '(' .. num(now), 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
	lease_rm[#lease_rm + 1] = id
	local r = load(id)
	if r and r[F_STATE] == S_PROCESSING then
		local msg = 'lease of ' .. r[F_LOWNER] .. ' expired'
		clear_lease(id, r)
		r[F_ERROR] = msg
		r[F_UPDATED] = now
		if r[F_MAXR] >= 0 and r[F_ATTEMPT] > r[F_MAXR] then
			hadd(id, r, {S_TERMINATED}, r[F_ATTEMPT], now, node, msg, '')
			finalize(id, r, S_TERMINATED, now)
		else
			hadd(id, r, {S_SCHEDULED}, r[F_ATTEMPT], now, node, msg, '')
			r[F_STATE] = S_SCHEDULED -- RunAt kept: it keeps its place in the queue
			place(id, r, now)
		end
		out[#out + 1] = id
		out[#out + 1] = save(id, r)
	end
end
flush_sets()
return out
