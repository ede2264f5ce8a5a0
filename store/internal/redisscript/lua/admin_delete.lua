-- admin_delete: remove instances in any state (store.Admin.Delete).
-- KEYS: the namespace keys (lib.lua). The keys it builds (q:<queue>:s,
--       kd:, kb:, kn:<kind>, l:<id>, no:<owner>) carry the namespace's
--       hash tag, as lib.lua explains, so they are in KEYS[1]'s slot.
-- ARGV: [1] prefix, [2] now (us), then the instance IDs.
-- A removed instance takes along what prune's removal takes (spec, state,
-- log list and log entries, kind count and kind-bucket place, the unique
-- key it holds) and its scheduled-set member, run-set membership and
-- place in its owner's set of running attempts (no:<owner>), and one off
-- the count (cnt) of its queue, kind and state. What
-- is left points at an instance that is gone and is dropped where it is
-- read: a ready-list member (claims drop it, and tell it by its Seq from an
-- instance that reuses the ID), a lease batch (rescue skips it), a
-- done-list or late-set member (prune skips it). Its history records stop
-- showing at once (lookups leave out records of instances that are gone);
-- the entries that hold them are freed by prune's sweep, whose horizon
-- (ctr field hsweept) moves up to now, or by history retention.
-- Returns two values per ID: code (0 removed, 1 no such instance) and the
-- State number it was in (0 when unknown).
local now = tonumber(ARGV[2])

local out, removed = {}, false
for i = 3, #ARGV do
	local id = ARGV[i]
	local craw = redis.call('HGET', K_INST, id)
	if not craw then
		out[#out + 1] = 1
		out[#out + 1] = 0
	else
		local p = spec(craw)
		local raw = redis.call('HGET', K_ST, id)
		local t = raw and state(raw)
		local was = S_SCHEDULED -- no state: waiting for its first attempt
		if raw then
			was = state_of(raw) or 0
		end
		if t and was == S_PROCESSING and t[T_OWNER] ~= '' then
			redis.call('SREM', PREFIX .. 'no:' .. t[T_OWNER], id)
		end
		count_move(id, craw, was ~= 0 and was or S_SCHEDULED, nil)
		if p then
			if was == S_SCHEDULED then
				redis.call('ZREM', sched_key(p[P_QUEUE]), sched_member(id, p[P_SEQ], p[P_PRIO]))
			end
			unlist(id, p)
		end
		redis.call('SREM', K_RUN, id)
		redis.call('HDEL', K_INST, id)
		redis.call('HDEL', K_ST, id)
		redis.call('HDEL', PREFIX .. 'prog', id)
		local lkey = PREFIX .. 'l:' .. id
		local eids = redis.call('LRANGE', lkey, 0, -1)
		for j = 1, #eids, 1000 do
			redis.call('XDEL', K_LOGS, unpack(eids, j, math.min(j + 999, #eids)))
		end
		redis.call('DEL', lkey)
		out[#out + 1] = 0
		out[#out + 1] = was
		removed = true
	end
end
flush_counts()
if removed then
	local ms = math.floor(now / 1000)
	if ms > tonumber(redis.call('HGET', K_CTR, 'hsweept') or '0') then
		redis.call('HSET', K_CTR, 'hsweept', num(ms))
	end
end
return out
