-- nodes_rescue: declare dead the nodes whose heartbeat is stale, and
-- rescue their running attempts.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us, the caller's clock, for history),
--       [3] rescuer node ID, [4] dead threshold (us), [5] limit,
--       [6] '1' to follow another registry's verdict (below), then
--       [7...] the node IDs it declared dead.
-- Keys built from the prefix (in KEYS[1]'s slot): the registry's (see
-- nodes_heartbeat.lua) and no:<owner> (lib.lua).
-- A live node other than the rescuer whose last heartbeat is older than
-- the threshold on the server's clock (TIME), both before now and before
-- the rescuer's own last heartbeat when it has one (so a stall of the
-- server, which delays every heartbeat, does not make the living look
-- dead to the first rescuer through), is declared dead: it moves
-- to ngone, nstat 'd', and its no:<id> set of running attempts is renamed
-- (merged) into nd:<id>, listed in ndead, so attempts it claims should it
-- come back are never taken for the dead ones. Then up to limit IDs are
-- popped from the nd:<id> sets; each still Processing under that owner
-- goes back to Scheduled at the front of its ready list keeping its RunAt
-- (the attempt stays counted), or to Terminated when out of retries, or to
-- Canceled when its cancel flag is set, with a history record whose error
-- names the dead node. Popped IDs no longer Processing under that owner
-- are dropped. One script run does all of it, so each node is declared
-- once and each attempt moved once, whatever the number of rescuers.
-- Following (a partition of a partitioned namespace other than the first,
-- whose registry alone judges liveness, so a node is declared dead once
-- and everywhere by the same verdict): the nodes in ARGV[7...] are
-- declared dead here, live or not in this registry, and no other; the
-- nodes stale here but not listed are returned as candidates for the
-- caller to check against the judging registry (a verdict it gave in an
-- earlier call whose following failed or ran out of limit).
-- Returns {dead, moved, candidates}: the IDs of the nodes declared dead by
-- this run, a flat list id1, spec1, state1, ... of the moved instances,
-- and the candidates (following only). PUBLISHes on the channels of
-- queues it refilled.
local now, node, dead_after, limit = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local tm = redis.call('TIME')
local snow = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local K_NLIVE, K_NGONE, K_NSTAT, K_NDEAD = PREFIX .. 'nlive', PREFIX .. 'ngone', PREFIX .. 'nstat', PREFIX .. 'ndead'

local ref = snow
local mine = redis.call('ZSCORE', K_NLIVE, node)
if mine and tonumber(mine) < ref then
	ref = tonumber(mine)
end
local dead, candidates = {}, {}
local function declare(id)
	redis.call('ZREM', K_NLIVE, id)
	redis.call('ZADD', K_NGONE, snow, id)
	redis.call('HSET', K_NSTAT, id, 'd')
	local src, dst = PREFIX .. 'no:' .. id, PREFIX .. 'nd:' .. id
	if redis.call('EXISTS', src) == 1 then
		redis.call('SUNIONSTORE', dst, dst, src)
		redis.call('DEL', src)
		redis.call('SADD', K_NDEAD, id)
	end
	dead[#dead + 1] = id
end
local follow = ARGV[6] == '1'
local listed = {}
if follow then
	for i = 7, #ARGV do
		listed[ARGV[i]] = true
		if redis.call('HGET', K_NSTAT, ARGV[i]) ~= 'd' then
			declare(ARGV[i])
		end
	end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_NLIVE, '-inf', '(' .. num(ref - dead_after))) do
	if id ~= node and not listed[id] then
		if follow then
			candidates[#candidates + 1] = id
		else
			declare(id)
		end
	end
end

local moved, n = {}, 0
-- take moves a dead node's attempt back (rescue_move, as rescue.lua does).
local function take(id, t, owner)
	local craw = rescue_move(id, t, 'node ' .. owner .. ' stopped heartbeating: declared dead and its attempt rescued', now)
	moved[#moved + 1] = {id, craw or ''}
	n = n + 1
end

for _, owner in ipairs(redis.call('SMEMBERS', K_NDEAD)) do
	if n >= limit then
		break
	end
	local key = PREFIX .. 'nd:' .. owner
	local ids = redis.call('SPOP', key, limit - n)
	if #ids > 0 then
		local raws = redis.call('HMGET', K_ST, unpack(ids))
		for j, id in ipairs(ids) do
			local raw = raws[j]
			local t = raw and (changed[id] or state(raw))
			if t and t[T_STATE] == S_PROCESSING and t[T_OWNER] == owner then
				take(id, t, owner)
			end
		end
	end
	if redis.call('SCARD', key) == 0 then
		redis.call('SREM', K_NDEAD, owner)
	end
end
return {dead, triples(moved, commit(now, node)), candidates}
