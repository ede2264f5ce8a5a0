-- append_logs: store a batch of log records.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, then per record seven values: instance ID, kind,
--       attempt, level, time (us), node, message.
-- Each record becomes one entry of the logs stream (field r, a cmsgpack
-- array {id, kind, attempt, level, time, node, message, seq}) and its entry
-- ID is pushed on the instance's list l:<id>; seq is the record's place in
-- that list. Returns the number of records stored.
local n = 0
for i = 2, #ARGV, 7 do
	local id = ARGV[i]
	local lkey = PREFIX .. 'l:' .. id
	local seq = redis.call('LLEN', lkey) + 1
	local t = tonumber(ARGV[i + 4])
	local eid = xadd_at(K_LOGS, 'lskew', t, cmsgpack.pack({
		id, ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), t, ARGV[i + 5], ARGV[i + 6], seq}))
	redis.call('RPUSH', lkey, eid)
	n = n + 1
end
return n
