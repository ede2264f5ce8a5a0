-- cancel: cancel one instance.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] instance ID.
-- A Scheduled instance becomes Canceled with a history record: it leaves
-- the scheduled set at once, and a ready list when a claim next pops it
-- (claims skip what is no longer Scheduled). A Processing one gets its
-- cancel flag set, which its owner sees at the next renew, and the
-- cancels channel gets a PUBLISH of "<attempt> <encoded ID>".
-- Returns {code, spec, state}: code 0 done (spec and the new state), 1 no
-- such instance, 2 already final (spec and state as stored), 3 corrupt
-- record.
local now, node, id = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local craw = redis.call('HGET', K_INST, id)
if not craw then
	return {1, '', ''}
end
local p = spec(craw)
if not p then
	return {3, '', ''}
end
local raw = redis.call('HGET', K_ST, id)
local t
if raw then
	t = state(raw)
	if not t then
		return {3, '', ''}
	end
else
	t = fresh(0)
end
if t[T_STATE] >= S_COMPLETED then
	return {2, craw, raw}
end
if t[T_STATE] == S_PROCESSING then
	t[T_CANCEL] = 1
	t[T_UPD] = now
	change(id, t)
	-- Tell the node running it at once (store.CancelNotifier).
	redis.call('PUBLISH', PREFIX .. 'cancels', string.format('%d', t[T_ATT]) .. ' ' .. id)
else
	redis.call('ZREM', sched_key(p[P_QUEUE]), sched_member(id, p[P_SEQ], p[P_PRIO]))
	count_move(id, craw, S_SCHEDULED, S_CANCELED)
	t[T_UPD] = now
	change(id, t, S_CANCELED, '', '')
	finalize(id, t, S_CANCELED, now)
end
local packed = commit(now, node)
return {0, craw, packed[id]}
