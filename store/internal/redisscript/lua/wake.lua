-- wake: make Scheduled instances that are due later ready now
-- (store.Shards.Wake: a sharded task's parent once its shards are done).
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, then the instance IDs.
-- An instance that is Scheduled with a RunAt after now gets RunAt now (in
-- its state and as its score in the queue's scheduled set, so the next
-- claim moves it to its ready list) and UpdatedAt now, and its queue's
-- channel a PUBLISH. Any other ID (missing, not Scheduled, due already,
-- undecodable) is left alone. No history record is written.
-- Returns how many instances were woken.
local now = tonumber(ARGV[2])
local n = 0
for i = 4, #ARGV do
	local id = ARGV[i]
	local p = spec(redis.call('HGET', K_INST, id))
	if p then
		local raw = redis.call('HGET', K_ST, id)
		local t
		if raw then
			t = state(raw)
		else
			t = fresh(0)
		end
		if t and t[T_STATE] == S_SCHEDULED then
			local runat = t[T_RUNAT]
			if runat == 0 then
				runat = p[P_RUNAT]
			end
			if runat > now then
				redis.call('ZADD', sched_key(p[P_QUEUE]), 'XX', now, sched_member(id, p[P_SEQ], p[P_PRIO]))
				t[T_RUNAT] = now
				t[T_UPD] = now
				change(id, t)
				wake(p[P_QUEUE])
				n = n + 1
			end
		end
	end
end
commit(now, ARGV[3])
return n
