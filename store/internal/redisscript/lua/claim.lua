-- claim: move up to limit ready instances of a queue to Processing.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, [4] lease deadline (us),
--       [5] limit, [6] queue, [7] claim seq as 20 decimal digits (all
--       zeros: none; compared as strings, since a Lua number is exact only
--       to 2^53), [8] how many kinds the claimer names (0: any kind), then
--       those kinds, then how many concurrency limits (0: none), then
--       each as kind, queue, max ('' for any kind or queue), then how
--       many rate limits, then each as kind, queue, interval (us),
--       tolerance (us), then the claimer's labels.
-- Rate limits (store.RateLimit, GCRA): rl (HASH kind \0 queue -> TAT, us
-- of the server's TIME) holds each limit's theoretical arrival time. A
-- lane's room under a rate limit is how many starts the limit allows at
-- the server's time now; each start moves the TAT on by the interval, and
-- those moved are written back at the end. A lane left out for a rate
-- limit sets the fifth reply: how long (us) until the first such limit
-- lets one start.
-- Concurrency limits (store.ConcurrencyLimit): a limit counts the
-- Processing instances it matches from cnt (count_move keeps it in the
-- same step as every transition, so whatever moves an attempt out of
-- Processing releases its slot). A lane is of one kind, so a lane's room
-- is the smallest Max minus use of the limits its kind matches; each
-- round of a priority's merge takes no more than the smallest room of its
-- lanes and leaves out the lanes with none, so no limit is passed and a
-- full lane never holds the others back.
-- A claim takes only from the lanes (lib.lua) whose kind the claimer
-- names and whose label requirements its labels satisfy (holds, once per
-- lane and call): it reads the queue's lane index
-- (q:<queue>:p) once, and merges the heads of the lanes it may take, per
-- priority, by RunAt then Seq; it never reads an entry of another lane.
-- A paused queue (in the paused set, see queue_admin.lua) gives nothing
-- and next 0.
-- With a claim seq, the owner's last claim is kept in o:<owner> (a cmsgpack
-- array: seq, then ID and attempt of each instance it took; it expires
-- with the claim's lease). A claim whose seq is that one claims nothing
-- and returns those instances still Processing under owner with their
-- attempt (a repeat of a call whose reply was lost); one whose seq is
-- below it returns nothing (a call that ran after a newer one).
-- First moves instances that became due (scheduled set score <= now) to
-- their lane, oldest RunAt first, at most MOVE per call (the rest move on
-- the next calls; the lane comes from the spec): each goes in its place by
-- RunAt then Seq (lib.lua flush_ready: the lane's list, or its set when it
-- sorts before the list's tail); and entries of ready lists written
-- before lanes into lanes.
-- Then pops ready IDs: highest priority first, lanes merged as above. A popped ID whose instance
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

local nk = tonumber(ARGV[8] or '0')
local any_kind, kinds, mine, mine_keys = nk == 0, {}, {}, {}
for i = 9, 8 + nk do
	kinds[ARGV[i]] = true
end
local nlim = tonumber(ARGV[9 + nk] or '0')
local lims = {}
for i = 10 + nk, 9 + nk + 3 * nlim, 3 do
	local lk, lq = ARGV[i], ARGV[i + 1]
	if lq == '' or lq == queue then
		lims[#lims + 1] = {kind = lk, queue = lq, max = tonumber(ARGV[i + 2]), used = 0}
	end
end
local rlims = {}
local nrl = tonumber(ARGV[10 + nk + 3 * nlim] or '0') or 0
local rl_first = 11 + nk + 3 * nlim
for i = rl_first, rl_first - 1 + 4 * nrl, 4 do
	local lk, lq = ARGV[i], ARGV[i + 1]
	if lq == '' or lq == queue then
		rlims[#rlims + 1] = {kind = lk, queue = lq, rate = true, iv = tonumber(ARGV[i + 2]), tol = tonumber(ARGV[i + 3]), field = lk .. '\0' .. lq, tat = 0}
	end
end
for i = rl_first + 4 * nrl, #ARGV do
	local l = ARGV[i]
	mine[l] = true
	local e = string.find(l, '=', 1, true)
	mine_keys[e and string.sub(l, 1, e - 1) or l] = true
end
-- holds tells whether the claimer's labels satisfy requirement r, as
-- store.LabelRequirementHolds does, in the compact form stores keep:
-- "!key" (no label key), "key" (key, bare or with a value), "key=v1|v2"
-- (key=v1 or key=v2), "key!=v1|v2" (neither).
local function holds(r)
	if string.byte(r, 1) == 33 then -- '!'
		return not mine_keys[string.sub(r, 2)]
	end
	local e = string.find(r, '=', 1, true)
	if not e then
		return mine_keys[r] == true
	end
	if mine[r] then
		return true -- key=value, as the claimer has it
	end
	local neg = e > 1 and string.byte(r, e - 1) == 33
	local key = string.sub(r, 1, neg and e - 2 or e - 1) .. '='
	for v in string.gmatch(string.sub(r, e + 1) .. '|', '([^|]*)|') do
		if mine[key .. v] then
			return not neg
		end
	end
	return neg
end
local lane_ok = {}
if not any_kind then
	-- The lanes without labels of the claimer's kinds, known at once.
	for k in pairs(kinds) do
		lane_ok[lane_of(k, '')] = true
	end
end
-- may_take tells whether the claimer may take the instances of lane.
local function may_take(lane)
	local v = lane_ok[lane]
	if v == nil and not string.find(lane, '\0', 1, true) then
		v = any_kind -- no labels: the kind decides
		lane_ok[lane] = v
	end
	if v == nil then
		local kind, labels = lane_parts(lane)
		v = any_kind or kinds[kind] == true
		for _, l in ipairs(labels) do
			if v and not holds(l) then
				v = false
			end
		end
		lane_ok[lane] = v
	end
	return v
end

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

local paused = redis.call('SISMEMBER', PREFIX .. 'paused', queue) == 1

-- lane_of_spec is the lane of the instance whose spec is raw; one that
-- cannot be decoded goes to the lane of kind '', which only a claimer of
-- any kind takes (and terminates).
local function lane_of_spec(raw)
	local p = spec(raw)
	if p then
		return lane_of(p[P_KIND], p[P_LABELS])
	end
	return lane_of('', '')
end

local levels = {}
if not paused then
	local due = redis.call('ZRANGEBYSCORE', skey, '-inf', num(now), 'WITHSCORES', 'LIMIT', 0, MOVE)
	if #due > 0 then
		local ms, ids = {}, {}
		for i = 1, #due, 2 do
			ms[#ms + 1] = due[i]
			ids[#ids + 1] = string.sub(due[i], SCHED_HEAD + 1)
		end
		chunked('ZREM', skey, ms)
		local specs = hmget(K_INST, ids)
		for j, m in ipairs(ms) do
			push_due(ids[j], queue, unbe(m, 7, 4) - PRIO_BIAS, tonumber(due[2 * j]), unbe(m, 1, 6), lane_of_spec(specs[j]))
		end
		flush_ready()
	end
	levels = redis.call('ZRANGE', lkey, 0, -1)
	-- Ready lists written before lanes (member: the priority alone) move
	-- into their lanes, MOVE entries per call, behind what is there.
	local legacy = false
	for _, lv in ipairs(levels) do
		if not string.find(lv, '/', 1, true) then
			legacy = true
			local ms = redis.call('LPOP', ready_key(queue, lv), MOVE)
			if not ms or #ms < MOVE then
				redis.call('ZREM', lkey, lv)
			end
			if ms then
				local ids = {}
				for j, m in ipairs(ms) do
					ids[j] = string.sub(m, LEGACY_READY_HEAD + 1)
				end
				local specs, sts = hmget(K_INST, ids), hmget(K_ST, ids)
				for j, id in ipairs(ids) do
					local p, t = spec(specs[j]), sts[j] and state(sts[j])
					local runat = (t and t[T_RUNAT] ~= 0 and t[T_RUNAT]) or (p and p[P_RUNAT]) or 0
					push_ready(id, queue, tonumber(lv), false, runat, unbe(ms[j], 1, 6), lane_of_spec(specs[j]))
				end
			end
		end
	end
	if legacy then
		flush_ready()
		levels = redis.call('ZRANGE', lkey, 0, -1)
	end
end

-- take pops up to want entries from the ready lists and sets of members
-- (lane index members of one priority), merged by RunAt then Seq. One list is
-- popped at once. Several are merged on their head hints (q:<queue>:h,
-- one HMGET): it reads a list only when its hint is the smallest, and a
-- hint found behind the list's real head is corrected and the merge goes
-- on, so it reads only the lists it takes from (plus those whose hints
-- were stale). It returns the entries and the members whose lists it
-- found empty (their lane index entries and hints are dropped).
local hkey = heads_key(queue)
-- A member names a ready list or a ready set (is_set): read_range reads
-- entries a to b (0-based, inclusive) of either, drop_first drops its
-- first n.
local function set_of(m)
	return is_set(m, string.find(m, '/', 1, true))
end
local function read_range(m, a, b)
	if set_of(m) then
		return redis.call('ZRANGE', ready_key(queue, m), a, b)
	end
	return redis.call('LRANGE', ready_key(queue, m), a, b)
end
local function drop_first(m, n)
	if set_of(m) then
		redis.call('ZREMRANGEBYRANK', ready_key(queue, m), 0, n - 1)
	else
		redis.call('LTRIM', ready_key(queue, m), n, -1)
	end
end
local function take(members, want)
	if #members == 1 then
		local ms
		if set_of(members[1]) then
			ms = {}
			local zs = redis.call('ZPOPMIN', ready_key(queue, members[1]), want)
			for i = 1, #zs, 2 do
				ms[#ms + 1] = zs[i]
			end
		else
			ms = redis.call('LPOP', ready_key(queue, members[1]), want) or {}
		end
		if #ms < want then
			redis.call('HDEL', hkey, members[1])
			return ms, {members[1]}
		end
		return ms, {}
	end
	local chunk = math.min(want, 4)
	local nm = #members
	local hints = redis.call('HMGET', hkey, unpack(members))
	-- Per lane (by index into members): the merge key (R, S): its hint,
	-- then its real next entry; the entries read (items, from pos), how
	-- many were taken, whether it ran out. The heap holds lane indexes.
	local R, S, items, pos, taken, empty = {}, {}, {}, {}, {}, {}
	for k = 1, nm do
		local hv = hints[k]
		if hv and #hv == 13 then
			R[k], S[k] = unbe(hv, 1, 7), unbe(hv, 8, 6)
		else
			R[k], S[k] = -1, -1
		end
		taken[k] = 0
	end
	local h = {}
	local function less(a, b)
		if R[a] ~= R[b] then return R[a] < R[b] end
		return S[a] < S[b]
	end
	local function down(i)
		local n = #h
		while true do
			local c = 2 * i
			if c > n then return end
			if c + 1 <= n and less(h[c + 1], h[c]) then c = c + 1 end
			if not less(h[c], h[i]) then return end
			h[c], h[i] = h[i], h[c]
			i = c
		end
	end
	for k = 1, nm do
		h[k] = k
	end
	for i = math.floor(nm / 2), 1, -1 do
		down(i)
	end
	local out, emptied = {}, {}
	while #out < want and #h > 0 do
		local k = h[1]
		local it = items[k]
		if not it or pos[k] > #it then
			-- Read on from what this claim took of the list.
			if it and #it < chunk then
				it = {}
			else
				it = read_range(members[k], taken[k], taken[k] + chunk - 1)
			end
			items[k], pos[k] = it, 1
		end
		local m = it[pos[k]]
		if not m then
			empty[k] = true
			h[1] = h[#h]
			h[#h] = nil
			down(1)
		else
			local r, s = unbe(m, 1, 7), unbe(m, 8, 6)
			if r ~= R[k] or s ~= S[k] then
				R[k], S[k] = r, s -- the hint was behind: the real head
			else
				out[#out + 1] = m
				pos[k], taken[k] = pos[k] + 1, taken[k] + 1
				local nx = it[pos[k]]
				if nx then
					R[k], S[k] = unbe(nx, 1, 7), unbe(nx, 8, 6)
				else
					S[k] = s + 0.5 -- read the next entry before comparing it
				end
			end
			down(1)
		end
	end
	-- Hints are written and dropped in one HSET and one HDEL for all lanes.
	local hset, hdel = {}, {}
	for k = 1, nm do
		local it = items[k]
		if taken[k] > 0 then
			drop_first(members[k], taken[k])
		end
		if empty[k] then
			emptied[#emptied + 1] = members[k]
			hdel[#hdel + 1] = members[k]
		elseif it and it[pos[k]] then
			local hv = string.sub(it[pos[k]], 1, 13)
			if hv ~= hints[k] then
				hset[#hset + 1] = members[k]
				hset[#hset + 1] = hv
			end
		elseif taken[k] > 0 then
			hdel[#hdel + 1] = members[k] -- unknown: read when next merged
		end
	end
	chunked('HSET', hkey, hset)
	chunked('HDEL', hkey, hdel)
	return out, emptied
end

-- stale tells whether ready entry m is not the place of the instance
-- whose spec is raw now: its Seq differs. A spec that cannot be decoded is
-- not stale: it is claimed, for the caller to terminate.
local function stale(m, raw)
	local seq = unbe(m, 8, 6)
	local head = cmsgpack.pack(seq)
	if string.sub(raw, 1, #head) == head then
		return false
	end
	local p = spec(raw)
	return p ~= nil and p[P_SEQ] ~= seq
end

-- The limits' use, from cnt; a limit's room per lane and kind.
local limited = false
if #lims > 0 and not paused then
	local all_queues, all_kinds
	for _, l in ipairs(lims) do
		local qs, ks = {l.queue}, {l.kind}
		if l.queue == '' then
			all_queues = all_queues or redis.call('SMEMBERS', K_QUEUES)
			qs = all_queues
		end
		if l.kind == '' then
			all_kinds = all_kinds or redis.call('SMEMBERS', K_KINDS)
			ks = all_kinds
		end
		local fs = {}
		for _, q in ipairs(qs) do
			for _, k in ipairs(ks) do
				fs[#fs + 1] = count_field(S_PROCESSING, q, k)
			end
		end
		for i = 1, #fs, 1000 do
			for _, v in ipairs(redis.call('HMGET', K_CNT, unpack(fs, i, math.min(i + 999, #fs)))) do
				if v then
					l.used = l.used + tonumber(v)
				end
			end
		end
	end
end
-- The rate limits' TATs, on the server's clock.
local rkey, rnow, rwait = PREFIX .. 'rl', 0, nil
if #rlims > 0 and not paused then
	local fs = {}
	for j, l in ipairs(rlims) do
		fs[j] = l.field
		lims[#lims + 1] = l
	end
	local tm = redis.call('TIME')
	rnow = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
	for j, v in ipairs(redis.call('HMGET', rkey, unpack(fs))) do
		rlims[j].tat = tonumber(v) or 0
	end
end
local kind_lims = {}
-- lims_of returns the limits that match instances of kind.
local function lims_of(kind)
	local ix = kind_lims[kind]
	if not ix then
		ix = {}
		for i, l in ipairs(lims) do
			if l.kind == '' or l.kind == kind then
				ix[#ix + 1] = i
			end
		end
		kind_lims[kind] = ix
	end
	return ix
end
-- room returns how many more instances of the lane of member m may start
-- (a large number when no limit matches it).
local function room(m)
	local slash = string.find(m, '/', 1, true)
	local kind = lane_parts(string.sub(m, is_set(m, slash) and slash + 2 or slash + 1))
	local r = 1000000
	for _, i in ipairs(lims_of(kind)) do
		local l = lims[i]
		if l.rate then
			local ahead = math.max(l.tat, rnow) - rnow
			if ahead > l.tol then
				r = 0
				rwait = math.min(rwait or (ahead - l.tol), ahead - l.tol)
			else
				r = math.min(r, math.floor((l.tol - ahead) / l.iv) + 1)
			end
		elseif l.max - l.used <= 0 then
			r = 0
			limited = true
		else
			r = math.min(r, l.max - l.used)
		end
	end
	return r
end
-- took counts a claimed instance whose spec is raw.
local function took(raw)
	local _, kind = spec_qk(raw)
	for _, i in ipairs(lims_of(kind or '')) do
		local l = lims[i]
		if l.rate then
			l.tat, l.moved = math.max(l.tat, rnow) + l.iv, true
		else
			l.used = l.used + 1
		end
	end
end

local ERR = 'undecodable state record'
local claimed, corrupt, n = {}, {}, 0
local li = 1
while n < limit and li <= #levels do
	-- The members of one priority are consecutive (same score, then by
	-- member); keep those of lanes the claimer may take.
	local slash = string.find(levels[li], '/', 1, true)
	local group, lp = {}, slash and string.sub(levels[li], 1, slash)
	while li <= #levels and (not lp or string.sub(levels[li], 1, #lp) == lp) do
		if lp and may_take(string.sub(levels[li], is_set(levels[li], #lp) and #lp + 2 or #lp + 1)) then
			group[#group + 1] = levels[li]
		end
		li = li + 1
		if not lp then break end
	end
	while n < limit and #group > 0 do
		local want = math.min(limit - n, 1000)
		if #lims > 0 then
			local kept = {}
			for _, m in ipairs(group) do
				local r = room(m)
				if r > 0 then
					kept[#kept + 1] = m
					want = math.min(want, r)
				end
			end
			group = kept
			if #group == 0 then
				break
			end
		end
		local ms, emptied = take(group, want)
		for _, e in ipairs(emptied) do
			redis.call('ZREM', lkey, e)
			for k, g in ipairs(group) do
				if g == e then
					table.remove(group, k)
					break
				end
			end
		end
		if #ms == 0 then
			break
		end
		local ids = {}
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
				took(specs[j])
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
					took(specs[j])
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

local rset = {}
for _, l in ipairs(lims) do
	if l.moved then
		rset[#rset + 1] = l.field
		rset[#rset + 1] = num(l.tat)
	end
end
chunked('HSET', rkey, rset)

local out = triples(claimed, commit(now, owner, owner, until_))

if cseq ~= '' then
	local took = {cmsgpack.pack(cseq)}
	for _, c in ipairs(claimed) do
		took[#took + 1] = cmsgpack.pack(c[1], c[3])
	end
	redis.call('SET', okey, table.concat(took), 'PX', math.max(1, math.floor((until_ - now) / 1000)))
end

local next = 0
if n < limit and not paused then
	local head = redis.call('ZRANGE', skey, 0, 0, 'WITHSCORES')
	if head[2] then
		next = tonumber(head[2])
	end
end
return {out, next, corrupt, limited and 1 or 0, rwait or 0}
