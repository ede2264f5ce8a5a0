-- nodes_heartbeat: record that a node is alive (or that it left).
-- KEYS: the namespace keys (lib.lua); not used.
-- ARGV: [1] prefix, [2] node ID, [3] node record (JSON, opaque here),
--       [4] '1' when the node is leaving, else '0', [5] retention (us).
-- The registry's keys are built from the prefix, which carries the
-- namespace's hash tag, so they are in KEYS[1]'s slot (see lib.lua):
--   nodes   HASH  node ID -> record (JSON written by the Go side)
--   nseen   HASH  node ID -> server time (us) of its last heartbeat
--   nlive   ZSET  live nodes, score = server time of the last heartbeat
--   ngone   ZSET  dead or left nodes, score = server time they went
--   nstat   HASH  node ID -> 'd' (declared dead) or 'l' (left)
--   ndead   SET   dead nodes with attempts still to rescue (nd:<id>)
--   nd:<id> SET   a dead node's attempts still to rescue (its no:<id>
--                 set, renamed when it was declared dead)
-- Reads the server's clock (TIME): liveness is judged on it alone. Deletes
-- the records of nodes gone, or silent, for longer than the retention
-- (keeping a dead node whose attempts are still to rescue).
-- Returns {seconds, microseconds, was_dead}: the server time, and 1 when
-- the node had been declared dead since its last heartbeat.
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local id, rec, leaving, retain = ARGV[2], ARGV[3], ARGV[4] == '1', tonumber(ARGV[5])
local K_NODES, K_NSEEN, K_NLIVE = PREFIX .. 'nodes', PREFIX .. 'nseen', PREFIX .. 'nlive'
local K_NGONE, K_NSTAT, K_NDEAD = PREFIX .. 'ngone', PREFIX .. 'nstat', PREFIX .. 'ndead'

local was_dead = redis.call('HGET', K_NSTAT, id) == 'd' and 1 or 0
redis.call('HSET', K_NODES, id, rec)
redis.call('HSET', K_NSEEN, id, num(now))
if leaving then
	redis.call('ZREM', K_NLIVE, id)
	redis.call('ZADD', K_NGONE, now, id)
	redis.call('HSET', K_NSTAT, id, 'l')
else
	redis.call('ZADD', K_NLIVE, now, id)
	redis.call('ZREM', K_NGONE, id)
	redis.call('HDEL', K_NSTAT, id)
end

local function forget(n)
	redis.call('HDEL', K_NODES, n)
	redis.call('HDEL', K_NSEEN, n)
	redis.call('HDEL', K_NSTAT, n)
	redis.call('ZREM', K_NLIVE, n)
	redis.call('ZREM', K_NGONE, n)
end
local cut = '(' .. num(now - retain)
for _, n in ipairs(redis.call('ZRANGEBYSCORE', K_NGONE, '-inf', cut, 'LIMIT', 0, 100)) do
	if redis.call('SISMEMBER', K_NDEAD, n) == 0 then
		forget(n)
	end
end
for _, n in ipairs(redis.call('ZRANGEBYSCORE', K_NLIVE, '-inf', cut, 'LIMIT', 0, 100)) do
	forget(n)
end
return {tonumber(tm[1]), tonumber(tm[2]), was_dead}
