-- prune: remove what retention no longer wants.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] finished before (us, 0 off),
--       [4] keep finished (count, 0 off), [5] history before (us, 0 off),
--       [6] logs before (us, 0 off), [7] limit per rule.
-- Removed instances take their history entries, log list and entries,
-- kind-index entry and unique key along. History and log entries are
-- removed oldest ID first; an entry whose ID is past the bound (a caller's
-- clock ran behind) but whose time is before it is removed as well.
-- Expired unique keys are dropped too.
-- Returns {instances, history, logs} removed.
local now, fin_before, keep = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local hist_before, logs_before, limit = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ni, nh, nl = 0, 0, 0

-- xdel removes entry eid of key and returns how many records it held.
local function xdel(key, eid, v)
	if not v then
		local e = redis.call('XRANGE', key, eid, eid)
		if not e[1] then
			return 0
		end
		v = e[1][2][2]
	end
	redis.call('XDEL', key, eid)
	local ok, n = pcall(function() return select('#', cmsgpack.unpack(v)) end)
	if ok then
		return n
	end
	return 1
end

local function drop(id)
	redis.call('ZREM', K_DONE, id)
	local raw = redis.call('HGET', K_INST, id)
	if raw then
		local r = decode(raw)
		if r then
			for eid in string.gmatch(r[F_HIST], '%S+') do
				nh = nh + xdel(K_HIST, eid)
			end
			redis.call('ZREM', PREFIX .. 'k:' .. r[F_KIND], id)
			if r[F_UKEY] ~= '' and redis.call('HGET', K_UNIQ, r[F_UKEY]) == id then
				redis.call('HDEL', K_UNIQ, r[F_UKEY])
				redis.call('ZREM', K_UNIQX, r[F_UKEY])
			end
		end
		redis.call('HDEL', K_INST, id)
		ni = ni + 1
	end
	local lkey = PREFIX .. 'l:' .. id
	for _, eid in ipairs(redis.call('LRANGE', lkey, 0, -1)) do
		nl = nl + xdel(K_LOGS, eid)
	end
	redis.call('DEL', lkey)
end

if fin_before > 0 then
	for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_DONE, '-inf', '(' .. num(fin_before), 'LIMIT', 0, limit)) do
		drop(id)
	end
end
if keep > 0 then
	local over = redis.call('ZCARD', K_DONE) - keep
	if over > limit then over = limit end
	if over > 0 then
		for _, id in ipairs(redis.call('ZRANGE', K_DONE, 0, over - 1)) do
			drop(id)
		end
	end
end

-- trim removes up to limit entries of key whose time (field 5 of the
-- value) is before before.
local function trim(key, skewf, before)
	local skew = tonumber(redis.call('HGET', K_CTR, skewf) or '0')
	local last = num(math.floor((before - 1) / 1000) + skew)
	local n, cursor = 0, '-'
	while n < limit do
		local es = redis.call('XRANGE', key, cursor, last, 'COUNT', limit)
		if #es == 0 then break end
		for _, e in ipairs(es) do
			local ok, v = pcall(cmsgpack.unpack, e[2][2])
			if not ok or type(v) ~= 'table' or type(v[5]) ~= 'number' or v[5] < before then
				n = n + xdel(key, e[1], e[2][2])
				if n >= limit then break end
			end
		end
		if #es < limit then break end
		cursor = '(' .. es[#es][1]
	end
	return n
end
if hist_before > 0 then
	nh = nh + trim(K_HIST, 'hskew', hist_before)
end
if logs_before > 0 then
	nl = nl + trim(K_LOGS, 'lskew', logs_before)
end

for _, ukey in ipairs(redis.call('ZRANGEBYSCORE', K_UNIQX, '-inf', num(now), 'LIMIT', 0, limit)) do
	redis.call('ZREM', K_UNIQX, ukey)
	local holder = redis.call('HGET', K_UNIQ, ukey)
	local h = holder and load(holder)
	if not h or h[F_UUNTIL] <= now then
		redis.call('HDEL', K_UNIQ, ukey)
	end
end
return {ni, nh, nl}
