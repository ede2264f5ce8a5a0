-- inspect_lag: the oldest ready instance of each kind in each given queue.
-- KEYS: the namespace keys (lib.lua); it also reads q:<queue>:... keys
-- built from the prefix, safe under the namespace's hash tag like every
-- script's.
-- ARGV: [1] prefix, [2] now (us), then per queue two values: its name and
--       how many kinds it has (a list's walk stops once that many kinds
--       were found, so a queue of one kind reads one entry per list).
-- Per queue it reads the due part of the scheduled set (at most SCAN
-- members) and the head of each lane's ready list (a lane holds one kind,
-- and its head became ready first), skipping stale entries and instances
-- no longer Scheduled, so the lag of the queue and of each kind is exact
-- (up to SCAN stale entries at a lane's head). A ready list written
-- before lanes mixes kinds: there a kind whose first ready instance is
-- deeper than SCAN entries is not found (documented in Core.Lag).
-- Returns, per queue, {queue, {kind1, runat1, kind2, runat2, ...}} with
-- runat in us. Read-only.
local now = tonumber(ARGV[2])
local SCAN = 1000
local out = {}
for qi = 3, #ARGV, 2 do
	local queue, want = ARGV[qi], tonumber(ARGV[qi + 1])
	local oldest, kinds = {}, {}
	local function see(kind, runat)
		if type(kind) == 'string' and type(runat) == 'number' and runat <= now then
			if not oldest[kind] then
				kinds[#kinds + 1] = kind
				oldest[kind] = runat
			elseif runat < oldest[kind] then
				oldest[kind] = runat
			end
		end
	end
	local due = redis.call('ZRANGEBYSCORE', sched_key(queue), '-inf', num(now), 'WITHSCORES', 'LIMIT', 0, SCAN)
	if #due > 0 then
		local ids = {}
		for i = 1, #due, 2 do
			ids[#ids + 1] = string.sub(due[i], SCHED_HEAD + 1)
		end
		local specs = hmget(K_INST, ids)
		for j = 1, #ids do
			if specs[j] then
				local _, kind = spec_qk(specs[j])
				see(kind, tonumber(due[2 * j]))
			end
		end
	end
	for _, lvl in ipairs(redis.call('ZRANGE', levels_key(queue), 0, -1)) do
		-- A lane's list (and its set) holds one kind, oldest first: its
		-- first live entry is the lane's oldest ready instance there. A list written before lanes
		-- (a member without '/') mixes kinds: walk it until every kind of
		-- the queue was found, at most SCAN entries.
		local slash = string.find(lvl, '/', 1, true)
		local legacy = not slash
		local zset = slash and is_set(lvl, slash)
		local head = legacy and LEGACY_READY_HEAD or READY_HEAD
		local rkey, from, found, nfound = PREFIX .. 'q:' .. queue .. ':r:' .. lvl, 0, {}, 0
		local need = legacy and want or 1
		while from < SCAN and nfound < need do
			-- Small steps first: the head is usually enough.
			local step = math.min(SCAN - from, from == 0 and 8 or 100)
			local ms = redis.call(zset and 'ZRANGE' or 'LRANGE', rkey, from, from + step - 1)
			from = from + step
			if #ms == 0 then
				break
			end
			local ids = {}
			for j, m in ipairs(ms) do
				ids[j] = string.sub(m, head + 1)
			end
			local sts, specs = hmget(K_ST, ids), hmget(K_INST, ids)
			for j = 1, #ids do
				if nfound >= need then
					break
				end
				local ok, _, seq, kind, _, _, _, runat = false
				if specs[j] then
					ok, _, seq, kind, _, _, _, runat = pcall(cmsgpack.unpack_limit, specs[j], 6)
				end
				-- Skip stale entries and instances no longer Scheduled.
				local eseq = legacy and unbe(ms[j], 1, 6) or unbe(ms[j], 8, 6)
				local ready = ok and seq == eseq
				if ready and sts[j] then
					local t = state(sts[j])
					ready = t and t[T_STATE] == S_SCHEDULED
					if ready and t[T_RUNAT] ~= 0 then
						runat = t[T_RUNAT]
					end
				end
				if ready then
					see(kind, runat)
					if not found[kind] then
						found[kind], nfound = true, nfound + 1
					end
				end
			end
		end
	end
	local flat = {}
	for _, k in ipairs(kinds) do
		flat[#flat + 1] = k
		flat[#flat + 1] = num(oldest[k])
	end
	out[#out + 1] = queue
	out[#out + 1] = flat
end
return out
