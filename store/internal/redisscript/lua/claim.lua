-- claim: move up to limit ready instances of a queue to Processing.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, [4] lease deadline (us),
--       [5] limit, [6] queue, [7] claim seq as 20 decimal digits (all
--       zeros: none; compared as strings, since a Lua number is exact only
--       to 2^53).
-- With a claim seq, the owner's last claim is kept in o:<owner> (a cmsgpack
-- array: seq, then ID and attempt of each instance it took; it expires
-- with the claim's lease). A claim whose seq is that one claims nothing
-- and returns those instances still Processing under owner with their
-- attempt (a repeat of a call whose reply was lost); one whose seq is
-- below it returns nothing (a call that ran after a newer one).
-- First moves instances that became due (scheduled set score <= now) to
-- the back of their priority's ready list, oldest RunAt first, at most
-- MOVE per call (the rest move on the next calls). Then pops ready IDs:
-- highest priority first, each list in order. A popped ID whose instance
-- is no longer Scheduled (canceled while it waited, or gone), or whose
-- entry is not the instance's (see stale), is dropped.
-- Each claimed instance gets State Processing, Attempt+1, the lease, a
-- Processing history record (one entry for the call); the call's lease
-- batch lists them.
-- Returns {claimed, next, corrupt}: claimed is a flat list id1, spec1,
-- state1, id2, ...; next is the earliest RunAt (us) still waiting in the
-- scheduled set when fewer than limit were claimed, else 0; corrupt lists
-- the claimed IDs whose stored state could not be decoded: they were
-- claimed as attempt 1 with an error saying so, for the caller to finish
-- as Terminated, so they never block the queue. The spec is returned as
-- stored, undecoded: the caller tells a damaged one.
local now, owner, until_, limit, queue = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local cseq = ARGV[7] or ''
if cseq == string.rep('0', 20) then
	cseq = ''
end
local MOVE = 1000
local skey, lkey = sched_key(queue), levels_key(queue)
local okey = PREFIX .. 'o:' .. owner

if cseq ~= '' then
	local raw = redis.call('GET', okey)
	local ok, last = false, nil
	if raw then
		ok, last = pcall(function() return {cmsgpack.unpack(raw)} end)
	end
	if ok and type(last[1]) == 'string' and #last[1] == #cseq and last[1] >= cseq then
		local out = {}
		if last[1] == cseq then
			local ids = {}
			for i = 2, #last - 1, 2 do
				ids[#ids + 1] = last[i]
			end
			if #ids > 0 then
				local sts, specs = hmget(K_ST, ids), hmget(K_INST, ids)
				for j, id in ipairs(ids) do
					local t = sts[j] and state(sts[j])
					if t and specs[j] and t[T_STATE] == S_PROCESSING and t[T_OWNER] == owner and t[T_ATT] == last[2 * j + 1] then
						out[#out + 1] = id
						out[#out + 1] = specs[j]
						out[#out + 1] = sts[j]
					end
				end
			end
		end
		return {out, 0, {}}
	end
end

local due = redis.call('ZRANGEBYSCORE', skey, '-inf', num(now), 'LIMIT', 0, MOVE)
if #due > 0 then
	chunked('ZREM', skey, due)
	for _, m in ipairs(due) do
		push_ready(string.sub(m, SCHED_HEAD + 1), queue, unbe(m, 7, 4) - PRIO_BIAS, false, 0, unbe(m, 1, 6))
	end
	flush_ready()
end

-- stale tells whether ready entry m is not the place of the instance
-- whose spec is raw now: its Seq differs. A spec that cannot be decoded is
-- not stale: it is claimed, for the caller to terminate.
local function stale(m, raw)
	local seq = unbe(m, 1, 6)
	local head = cmsgpack.pack(seq)
	if string.sub(raw, 1, #head) == head then
		return false
	end
	local p = spec(raw)
	return p ~= nil and p[P_SEQ] ~= seq
end

local ERR = 'undecodable state record'
local claimed, corrupt, n = {}, {}, 0
local levels = redis.call('ZRANGE', lkey, 0, -1)
local li = 1
while n < limit and li <= #levels do
	local rkey = PREFIX .. 'q:' .. queue .. ':r:' .. levels[li]
	local want = math.min(limit - n, 1000)
	local ms = redis.call('LPOP', rkey, want)
	if not ms or #ms < want then
		-- The list is empty now.
		redis.call('ZREM', lkey, levels[li])
		li = li + 1
	end
	local ids = ms and {}
	if ms then
		for j, m in ipairs(ms) do
			ids[j] = string.sub(m, READY_HEAD + 1)
		end
		local sts = redis.call('HMGET', K_ST, unpack(ids))
		local specs = redis.call('HMGET', K_INST, unpack(ids))
		for j, id in ipairs(ids) do
			if specs[j] and stale(ms[j], specs[j]) then
				-- An entry left by a canceled instance whose ID was reused
				-- after it was pruned: not this instance's place.
			elseif specs[j] and not sts[j] then
				claim_first(id)
				count_move(id, specs[j], S_SCHEDULED, S_PROCESSING)
				started(id, until_)
				claimed[#claimed + 1] = {id, specs[j], 1}
				n = n + 1
			elseif specs[j] then
				local t, bad = state(sts[j]), false
				if not t then
					t, bad = fresh(0), true
				end
				if t[T_STATE] == S_SCHEDULED then
					t[T_STATE] = S_PROCESSING
					t[T_ATT] = t[T_ATT] + 1
					t[T_OWNER] = owner
					t[T_UNTIL] = until_
					t[T_CANCEL] = 0
					t[T_UPD] = now
					if bad then
						t[T_ERR] = ERR
						corrupt[#corrupt + 1] = id
					end
					change(id, t, S_PROCESSING, bad and ERR or '')
					count_move(id, specs[j], S_SCHEDULED, S_PROCESSING)
					started(id, until_)
					claimed[#claimed + 1] = {id, specs[j], t[T_ATT]}
					n = n + 1
				end
			elseif sts[j] then
				-- A state without a spec is a leftover; drop it.
				redis.call('HDEL', K_ST, id)
			end
		end
	end
end

local out = triples(claimed, commit(now, owner, owner, until_))

if cseq ~= '' then
	local took = {cmsgpack.pack(cseq)}
	for _, c in ipairs(claimed) do
		took[#took + 1] = cmsgpack.pack(c[1], c[3])
	end
	redis.call('SET', okey, table.concat(took), 'PX', math.max(1, math.floor((until_ - now) / 1000)))
end

local next = 0
if n < limit then
	local head = redis.call('ZRANGE', skey, 0, 0, 'WITHSCORES')
	if head[2] then
		next = tonumber(head[2])
	end
end
return {out, next, corrupt}
