-- plan: weigh the two ways of looking instances up by state.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] kind ('' for every kind), [3] queue ('' for every
--       queue), [4] since (us of CreatedAt, 0 open), [5] until (us, 0
--       open), then the states asked for.
-- Returns {by_state, by_kind, stored}: about how many entries a lookup
-- reads through the states' own structures (the ready lists and scheduled
-- sets of the queues for Scheduled, the run set for Processing, a final
-- state's done list and the late set) and through the kind buckets over
-- the CreatedAt range (the kind's count, the sum of its cnt fields over
-- every state and queue, scaled by the share of its bucket seconds in the
-- range), and how many instances are stored. Reads counts only.
-- Read-only.
local kind, queue = ARGV[2], ARGV[3]
local since, until_ = tonumber(ARGV[4]), tonumber(ARGV[5])
local states = {}
for i = 6, #ARGV do
	states[tonumber(ARGV[i])] = true
end

local by_state = 0
if states[S_SCHEDULED] then
	local queues = {queue}
	if queue == '' then
		queues = redis.call('SMEMBERS', K_QUEUES)
	end
	for _, q in ipairs(queues) do
		for _, prio in ipairs(redis.call('ZRANGE', levels_key(q), 0, -1)) do
			local slash = string.find(prio, '/', 1, true)
			local cmd = (slash and is_set(prio, slash)) and 'ZCARD' or 'LLEN'
			by_state = by_state + redis.call(cmd, PREFIX .. 'q:' .. q .. ':r:' .. prio)
		end
		by_state = by_state + redis.call('ZCARD', sched_key(q))
	end
end
if states[S_PROCESSING] then
	by_state = by_state + redis.call('SCARD', K_RUN)
end
local final = false
for _, st in ipairs(FINALS) do
	if states[st] then
		final = true
		by_state = by_state + redis.call('LLEN', done_key(st))
	end
end
if final then
	by_state = by_state + redis.call('ZCARD', K_LATE)
end

-- Each kind's instances: its cnt fields (count_field: a state digit, the
-- queue's length in 2 bytes, the queue, then the kind) summed.
local of_kind = {}
local cnt = redis.call('HGETALL', K_CNT)
for i = 1, #cnt, 2 do
	local f = cnt[i]
	local k = string.sub(f, 4 + unbe(f, 2, 2))
	of_kind[k] = (of_kind[k] or 0) + tonumber(cnt[i + 1])
end

local by_kind = 0
local kinds = {kind}
if kind == '' then
	kinds = redis.call('SMEMBERS', K_KINDS)
end
for _, k in ipairs(kinds) do
	local n = of_kind[k] or 0
	if n > 0 and (since > 0 or until_ > 0) then
		local dir = PREFIX .. 'kd:' .. k
		local secs = redis.call('ZCARD', dir)
		if secs > 0 then
			local lo, hi = '-inf', '+inf'
			if since > 0 then
				lo = num(math.floor(since / 1000000))
			end
			if until_ > 0 then
				hi = num(math.floor((until_ - 1) / 1000000))
			end
			n = n * redis.call('ZCOUNT', dir, lo, hi) / secs
		end
	end
	by_kind = by_kind + n
end
return {math.floor(by_state + 0.5), math.floor(by_kind + 0.5), redis.call('HLEN', K_INST)}
