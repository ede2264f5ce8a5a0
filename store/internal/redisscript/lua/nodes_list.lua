-- nodes_list: read the node registry.
-- KEYS: the namespace keys (lib.lua); not used.
-- ARGV: [1] prefix.
-- Reads the registry's keys (see nodes_heartbeat.lua; built from the
-- prefix, so in KEYS[1]'s slot) and the server's clock.
-- Returns {seconds, microseconds, nodes}: the server time, and a flat list
-- id1, record1, seen1 (us), status1 ('' live, 'd' dead, 'l' left),
-- gone1 (us, 0 when live), id2, ...
local tm = redis.call('TIME')
local K_NODES, K_NSEEN, K_NGONE, K_NSTAT = PREFIX .. 'nodes', PREFIX .. 'nseen', PREFIX .. 'ngone', PREFIX .. 'nstat'
local all = redis.call('HGETALL', K_NODES)
local out = {}
for i = 1, #all, 2 do
	local id = all[i]
	out[#out + 1] = id
	out[#out + 1] = all[i + 1]
	out[#out + 1] = redis.call('HGET', K_NSEEN, id) or '0'
	out[#out + 1] = redis.call('HGET', K_NSTAT, id) or ''
	out[#out + 1] = redis.call('ZSCORE', K_NGONE, id) or '0'
end
return {tonumber(tm[1]), tonumber(tm[2]), out}
