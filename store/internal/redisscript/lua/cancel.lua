-- cancel: cancel one instance.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] instance ID.
-- A Scheduled (or Created) instance leaves its queue and becomes Canceled
-- with a history record; a Processing one gets its cancel flag set, which
-- its owner sees at the next renew.
-- Returns {code, record}: code 0 done (record is the new record), 1 no
-- such instance, 2 already final (record as stored), 3 corrupt record.
local now, node, id = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local r, why = load(id)
if not r then
	return {why == 'corrupt' and 3 or 1, ''}
end
if r[F_STATE] >= S_COMPLETED then
	return {2, redis.call('HGET', K_INST, id)}
end
if r[F_STATE] == S_PROCESSING then
	r[F_CANCEL] = 1
	r[F_UPDATED] = now
	return {0, save(id, r)}
end
unplace(id, r)
hadd(id, r, {S_CANCELED}, r[F_ATTEMPT], now, node, '', '')
finalize(id, r, S_CANCELED, now)
flush_sets()
return {0, save(id, r)}
