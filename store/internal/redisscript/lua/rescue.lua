-- rescue: take back attempts whose lease ended.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] limit.
-- Takes up to limit lease-set entries with a deadline before now. Each
-- Processing instance goes back to Scheduled at the front of its ready
-- list, keeping its RunAt and its place (the attempt stays counted), or to
-- Terminated when Attempt > MaxRetries (MaxRetries < 0 retries forever),
-- with a history record whose error says the lease expired. One whose
-- spec is damaged is Terminated. Stale entries (no longer Processing,
-- missing, corrupt state) are dropped from the lease set.
-- Returns a flat list id1, spec1, state1, id2, ... of the moved instances
-- in their new state. PUBLISHes on the channels of queues it refilled.
local now, node, limit = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local moved = {}
local ids = redis.call('ZRANGEBYSCORE', K_LEASE, '-inf', '(' .. num(now), 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
	lease_rm[#lease_rm + 1] = id
	local raw = redis.call('HGET', K_ST, id)
	local t = raw and state(raw)
	if t and t[T_STATE] == S_PROCESSING then
		local craw = redis.call('HGET', K_INST, id)
		local p = spec(craw)
		local msg = 'lease of ' .. t[T_OWNER] .. ' expired'
		clear_lease(id, t)
		t[T_ERR] = msg
		t[T_UPD] = now
		if not p or (p[P_MAXR] >= 0 and t[T_ATT] > p[P_MAXR]) then
			change(id, t, S_TERMINATED, msg, '')
			finalize(id, t, S_TERMINATED, now)
		else
			change(id, t, S_SCHEDULED, msg, '')
			t[T_STATE] = S_SCHEDULED
			local runat = t[T_RUNAT]
			if runat == 0 then
				runat = p[P_RUNAT]
			end
			-- RunAt kept: due ones go to the front, keeping their place.
			place(id, p[P_QUEUE], p[P_PRIO], p[P_SEQ], runat, now, true)
		end
		moved[#moved + 1] = {id, craw or ''}
	end
end
local packed = commit(now, node)
local out = {}
for _, m in ipairs(moved) do
	out[#out + 1] = m[1]
	out[#out + 1] = m[2]
	out[#out + 1] = packed[m[1]]
end
return out
