-- progress_set: store a running attempt's progress (store.Progress).
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] instance ID, [3] owner, [4] attempt, [5] the
--       progress as the Go side packs it (codec.go), which this script
--       never reads.
-- Writes the progress to the prog hash only while the instance is
-- Processing in that attempt under that owner's lease.
-- Returns 0 stored, 1 no such instance, 2 not the caller's running
-- attempt (nothing written), 3 corrupt state.
local id, owner, attempt = ARGV[2], ARGV[3], tonumber(ARGV[4])
if redis.call('HEXISTS', K_INST, id) == 0 then
	return 1
end
local raw = redis.call('HGET', K_ST, id)
if not raw then
	return 2 -- never claimed: Scheduled
end
local t = state(raw)
if not t then
	return 3
end
if t[T_STATE] ~= S_PROCESSING or t[T_OWNER] ~= owner or t[T_ATT] ~= attempt then
	return 2
end
redis.call('HSET', PREFIX .. 'prog', id, ARGV[5])
return 0
