-- prune: remove what retention no longer wants.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] finished before (us, 0 off),
--       [4] keep finished (count, 0 off), [5] history before (us, 0 off),
--       [6] logs before (us, 0 off), [7] limit per rule.
-- A removed instance takes its state, spec, log list and log entries,
-- kind-bucket place and unique key along. Its history records live in
-- entries shared with other instances: they stop showing at once (lookups
-- leave out records of instances that are gone) and their memory is freed
-- when history retention trims the entries; they are counted as removed
-- with the instance. History entries are trimmed by their time (HistoryBefore),
-- counting the records of instances still stored; an entry whose ID is past
-- the bound (a caller's clock ran behind) but whose time is before it is
-- removed as well, reading at most 4 * limit entries a call (see trim).
-- Log entries likewise by LogsBefore. Expired unique keys
-- are dropped too.
-- History entries whose records all belong to removed instances are freed
-- too, without waiting for HistoryBefore: a sweep reads entries from a
-- cursor (ctr field hsweep) up to the newest FinishedAt ever removed (ctr
-- field hsweept, ms: a later entry holds a record of an instance that
-- finished after it, so of one still stored), at most 4 * limit entry
-- reads and ID checks per call, and deletes those with no record of a
-- stored instance; at that bound the cursor goes back to the head, so an
-- entry still live when read is read again on the next round. Their
-- records were counted with their instances; the sweep counts nothing.
-- Final instances are removed oldest FinishedAt first across the done
-- lists of the four final states and the late set, at most limit per call
-- in all; each removal also takes one off its kind's count in ctr. A
-- member left behind by a retried or deleted instance (see current) is
-- dropped from its list and counts towards limit, but removes nothing.
-- Returns {instances, history, logs} removed.
local now, fin_before, keep = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local hist_before, logs_before, limit = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ni, nh, nl = 0, 0, 0

local function drop(id)
	local craw = redis.call('HGET', K_INST, id)
	if craw then
		local p = spec(craw)
		local raw = redis.call('HGET', K_ST, id)
		local t = raw and state(raw)
		nh = nh + (t and t[T_HN] or 2)
		count_move(id, craw, t and t[T_STATE] or S_SCHEDULED, nil)
		if p then
			unlist(id, p)
		end
		redis.call('HDEL', K_INST, id)
		redis.call('HDEL', K_ST, id)
		redis.call('HDEL', PREFIX .. 'prog', id)
		ni = ni + 1
	end
	local lkey = PREFIX .. 'l:' .. id
	local eids = redis.call('LRANGE', lkey, 0, -1)
	if #eids > 0 then
		nl = nl + redis.call('XDEL', K_LOGS, unpack(eids))
	end
	redis.call('DEL', lkey)
end

-- The oldest final instances, at most limit: the heads of the done
-- lists (one per final state) and of the late set, merged by FinishedAt.
local heads, hi = {}, {}
for _, st in ipairs(FINALS) do
	heads[st] = redis.call('LRANGE', done_key(st), 0, limit - 1)
	hi[st] = 1
end
local lates = redis.call('ZRANGE', K_LATE, 0, limit - 1, 'WITHSCORES')
local li = 1
-- oldest returns the oldest instance not taken yet, its FinishedAt and
-- the state whose list holds it (nil: the late set).
local function oldest()
	local id, t, from
	for _, st in ipairs(FINALS) do
		local m = heads[st][hi[st]]
		if m then
			local mt = unbe(m, 1, 7)
			if not t or mt < t then
				id, t, from = string.sub(m, 8), mt, st
			end
		end
	end
	local lt = lates[li] and tonumber(lates[li + 1])
	if lt and (not t or lt < t) then
		return lates[li], lt, nil
	end
	return id, t, from
end

-- current tells whether the done-list (from: its state) or late-set (from
-- nil) member of id finished at t is the instance's place now: a retried
-- instance (admin_retry) leaves its member behind, and so does a deleted
-- one (admin_delete); such a member is passed over. A state that cannot
-- be decoded is taken as current, so a damaged record is still removed.
local function current(id, t, from)
	local raw = redis.call('HGET', K_ST, id)
	if not raw then
		return false -- gone, or waiting for its first attempt
	end
	local s = state(raw)
	if not s then
		return true
	end
	if from then
		return s[T_STATE] == from and s[T_FIN] == t
	end
	return s[T_STATE] >= S_COMPLETED and s[T_FIN] == t
end

-- take drops the instance oldest returned, when that member is still its
-- place, and moves past it.
local late_rm = {}
local newest = 0 -- the newest FinishedAt removed by this call
local function take(id, t, from)
	if t > newest then
		newest = t
	end
	if from then
		hi[from] = hi[from] + 1
	else
		late_rm[#late_rm + 1] = id
		li = li + 2
	end
	if current(id, t, from) then
		drop(id)
	end
end

local removed = 0
if fin_before > 0 then
	while removed < limit do
		local id, t, from = oldest()
		if not id or t >= fin_before then
			break
		end
		take(id, t, from)
		removed = removed + 1
	end
end
if keep > 0 then
	local over = redis.call('ZCARD', K_LATE) - keep - removed
	for _, st in ipairs(FINALS) do
		over = over + redis.call('LLEN', done_key(st))
	end
	while over > 0 and removed < limit do
		local id, t, from = oldest()
		if not id then
			break
		end
		take(id, t, from)
		removed = removed + 1
		over = over - 1
	end
end
for _, st in ipairs(FINALS) do
	if hi[st] > 1 then
		redis.call('LTRIM', done_key(st), hi[st] - 1, -1)
	end
end
chunked('ZREM', K_LATE, late_rm)

-- entry_ids returns the instance IDs a history entry value holds records
-- of, and how many records each has there; nil when the value is not an
-- entry.
local function entry_ids(v)
	local ok, a = pcall(function() return {cmsgpack.unpack(v)} end)
	if not ok or #a < 3 then
		return nil
	end
	local ids, per = {}, 1
	if a[1] == 'e' then
		per = 2
		for i = 4, #a do
			ids[#ids + 1] = a[i]
		end
	else
		for i = 4, #a do
			if type(a[i]) == 'table' then
				ids[#ids + 1] = a[i][1]
			end
		end
	end
	return ids, per
end

-- live counts the records in a history entry value whose instance is
-- still stored; nil when the value is not an entry.
local function live(v)
	local ids, per = entry_ids(v)
	if not ids then
		return nil
	end
	local n = 0
	for _, id in ipairs(ids) do
		if type(id) == 'string' and redis.call('HEXISTS', K_INST, id) == 1 then
			n = n + per
		end
	end
	return n
end

-- trim removes up to limit entries of key whose time is before before:
-- history entries carry it as their second value, log records as field 5.
-- An entry's ID is at or after its time and at most the stream's skew
-- after it, so entries up to before + skew are read; it reads at most
-- 4 * limit of them per call, kept ones included. Those with an ID before
-- the bound come first and always go; one past it (written by a caller
-- whose clock ran behind) behind more newer entries than that is removed
-- by a later call, at the latest once the bound passes its ID. Reading
-- on until limit were removed made every call read every entry of the
-- skew window, which one caller's clock an hour behind, once, makes an
-- hour of history for good.
local function trim(key, skewf, before, hist)
	local skew = tonumber(redis.call('HGET', K_CTR, skewf) or '0')
	local last = num(math.floor((before - 1) / 1000) + skew)
	local n, entries, cursor = 0, 0, '-'
	local budget = 4 * limit
	while entries < limit and budget > 0 do
		local count = math.min(limit, budget)
		local es = redis.call('XRANGE', key, cursor, last, 'COUNT', count)
		if #es == 0 then break end
		budget = budget - #es
		for _, e in ipairs(es) do
			local v = e[2][2]
			local ok, t
			if hist then
				local _
				ok, _, _, t = pcall(cmsgpack.unpack_limit, v, 2)
			else
				local r
				ok, r = pcall(cmsgpack.unpack, v)
				t = ok and type(r) == 'table' and r[5]
			end
			if not ok or type(t) ~= 'number' or t < before then
				if hist then
					n = n + (live(v) or 1)
				else
					n = n + 1
				end
				redis.call('XDEL', key, e[1])
				entries = entries + 1
				if entries >= limit then break end
			end
		end
		if #es < count then break end
		cursor = '(' .. es[#es][1]
	end
	return n
end
-- The sweep of history entries left with no record of a stored instance:
-- from the cursor to the horizon, at most 4 * limit entry reads and ID
-- checks per call; at the horizon the cursor goes back to the head, so an
-- entry still live when read is read again on the next round.
local sweep_to = tonumber(redis.call('HGET', K_CTR, 'hsweept') or '0')
if newest > 0 and math.floor(newest / 1000) > sweep_to then
	sweep_to = math.floor(newest / 1000)
	redis.call('HSET', K_CTR, 'hsweept', num(sweep_to))
end
if sweep_to > 0 then
	local budget = 4 * limit
	local cur = redis.call('HGET', K_CTR, 'hsweep')
	local from = cur and ('(' .. cur) or '-'
	local last, at_end = nil, false
	while budget > 0 do
		local es = redis.call('XRANGE', K_HIST, from, num(sweep_to), 'COUNT', 100)
		for _, e in ipairs(es) do
			budget = budget - 1
			local ids = entry_ids(e[2][2])
			local alive = ids == nil -- not an entry: left to history retention
			for _, id in ipairs(ids or {}) do
				budget = budget - 1
				if type(id) ~= 'string' or redis.call('HEXISTS', K_INST, id) == 1 then
					alive = true
					break
				end
			end
			if not alive then
				redis.call('XDEL', K_HIST, e[1])
			end
			last = e[1]
			if budget <= 0 then
				break
			end
		end
		if #es < 100 and (#es == 0 or last == es[#es][1]) then
			at_end = true
			break
		end
		from = '(' .. last
	end
	if at_end then
		redis.call('HDEL', K_CTR, 'hsweep')
	elseif last then
		redis.call('HSET', K_CTR, 'hsweep', last)
	end
end

if hist_before > 0 then
	nh = nh + trim(K_HIST, 'hskew', hist_before, true)
end
if logs_before > 0 then
	nl = nl + trim(K_LOGS, 'lskew', logs_before, false)
end

for _, ukey in ipairs(redis.call('ZRANGEBYSCORE', K_UNIQX, '-inf', num(now), 'LIMIT', 0, limit)) do
	redis.call('ZREM', K_UNIQX, ukey)
	local holder = redis.call('HGET', K_UNIQ, ukey)
	local h = holder and spec(redis.call('HGET', K_INST, holder))
	if not h or h[P_UUNTIL] <= now then
		redis.call('HDEL', K_UNIQ, ukey)
	end
end
flush_counts()
return {ni, nh, nl}
