-- enqueue: store new instances in state Scheduled.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] n, the number of
--       instances, [5] 'r' when an ID occurs more than once among them
--       (else ''), [6 .. 5+n] their IDs, then the instances in runs (see
--       codec.go enqueueArgs): consecutive instances alike in kind, queue,
--       priority, labels, the second of CreatedAt and what their
--       arguments carry share one run. A run is nine values:
--         kind, queue, priority, labels (as P_LABELS holds them; '' for
--         none), the second of CreatedAt (decimal), flags ('d': due at
--         now; 'x': each instance carries a spec tail; 'u': each carries
--         a unique key), the number of its instances, the history entry
--         part of its IDs (each as cmsgpack packs it) and its kind bucket
--         part (each ID behind its length in 2 bytes),
--       then per instance: its spec (the ten values the Go side writes,
--       see lib.lua), its RunAt (be(RunAt, 7) when due, else decimal),
--       with 'x' the spec's tail (P_LABELS, P_META, P_SHARD as the spec
--       keeps them), with 'u' its unique key and UniqueUntil (us).
-- The Go side does per run what is the same for every instance of it, so
-- the per-instance work here is the record, its ready-list or scheduled
-- entry and its share of a few variadic calls.
-- Returns {stored, first seq, then code, j, id, seq per instance not
-- stored}: the instances stored have Seqs first, first + 1, ... in their
-- order; j is an instance's place (1-based), code 1 duplicate unique key
-- (id is the holder's), 2 an instance with this ID exists already (seq is
-- its Seq; nothing changes, so a retried Enqueue is idempotent), 3 the
-- existing record under this ID is corrupt.
-- The stored instances share one history entry (value: cmsgpack 'e', now,
-- node, then their IDs), which stands for a Created and a Scheduled record
-- of each; their spec starts with Seq and ends with now and that entry's
-- ID. Each is added to its kind's bucket of its CreatedAt second (and
-- counted in its kind's ctr field) and to its queue, and the queue's
-- channel gets a PUBLISH.
local now, node = tonumber(ARGV[2]), ARGV[3]
-- Times stay the Go side's decimal text where only their text is needed
-- (the ms of the history entry's ID): converting a number to text costs
-- more than most of what follows.
local now_ms = div_pow10(ARGV[2], 3)
local n = tonumber(ARGV[4])
local I0 = 5 -- ARGV[I0 + j] is instance j's ID

-- rej[j] = {code, id, seq} for an instance not stored (code 4: a later
-- occurrence of an ID stored by this call, seq filled in below).
local rej, nrej = {}, 0
for a = 1, n, 1000 do
	local b = math.min(a + 999, n)
	local v = redis.call('HMGET', K_INST, unpack(ARGV, I0 + a, I0 + b))
	for k = 1, b - a + 1 do
		if v[k] then
			local j = a + k - 1
			local o = spec(v[k])
			if o then
				rej[j] = {2, ARGV[I0 + j], o[P_SEQ]}
			else
				rej[j] = {3, ARGV[I0 + j], 0}
			end
			nrej = nrej + 1
		end
	end
end

-- The runs.
local runs = {}
do
	local i, j = I0 + n + 1, 1
	while j <= n do
		local flags = ARGV[i + 5]
		local r = {kind = ARGV[i], queue = ARGV[i + 1], prio = tonumber(ARGV[i + 2]), labels = ARGV[i + 3],
			sec = ARGV[i + 4], due = string.find(flags, 'd', 1, true) ~= nil, x = string.find(flags, 'x', 1, true) ~= nil,
			u = string.find(flags, 'u', 1, true) ~= nil, count = tonumber(ARGV[i + 6]), hist = ARGV[i + 7],
			bucket = ARGV[i + 8], j = j, i = i + 9}
		r.stride = 2
		if r.x then r.stride = r.stride + 1 end
		if r.u then r.stride = r.stride + 2 end
		runs[#runs + 1] = r
		i = r.i + r.count * r.stride
		j = j + r.count
	end
end

-- Repeated IDs (only when the Go side saw some): a later occurrence of an
-- ID stored by this call is reported as existing, with the Seq the first
-- got; a later occurrence of one not stored is tried again.
local firstof
if ARGV[5] == 'r' then
	firstof = {}
end
-- Unique keys: one HMGET of every key the call's instances hold, then
-- the decisions in order (a key taken earlier in the call counts), then
-- one HSET and one ZADD of the keys taken.
local held, fetched, uuntil_of, utake, uzadd = {}, {}, {}, nil, nil
for _, r in ipairs(runs) do
	if r.u then
		local ukeys, i = {}, r.i
		for j = r.j, r.j + r.count - 1 do
			if not rej[j] then
				ukeys[#ukeys + 1] = ARGV[i + r.stride - 2]
			end
			i = i + r.stride
		end
		local v = hmget(K_UNIQ, ukeys)
		for k, ukey in ipairs(ukeys) do
			if fetched[ukey] == nil then
				fetched[ukey] = v[k]
			end
		end
	end
	if r.u or firstof then
		local i = r.i
		for j = r.j, r.j + r.count - 1 do
			local id = ARGV[I0 + j]
			if firstof and not rej[j] and firstof[id] then
				rej[j] = {4, id, firstof[id]}
				nrej = nrej + 1
			end
			if r.u and not rej[j] then
				local ukey = ARGV[i + r.stride - 2]
				local uuntil = tonumber(ARGV[i + r.stride - 1])
				local holder = held[ukey]
				if holder == nil then
					holder = fetched[ukey]
				end
				local dup
				if holder and holder ~= id then
					local until_ = uuntil_of[holder]
					if not until_ then
						local h = spec(redis.call('HGET', K_INST, holder))
						until_ = h and h[P_UUNTIL] or 0
					end
					if until_ > now then
						dup = holder
					end
				end
				if dup then
					rej[j] = {1, dup, 0}
					nrej = nrej + 1
				else
					held[ukey] = id
					uuntil_of[id] = uuntil
					utake, uzadd = utake or {}, uzadd or {}
					utake[#utake + 1] = ukey
					utake[#utake + 1] = id
					uzadd[#uzadd + 1] = uuntil
					uzadd[#uzadd + 1] = ukey
				end
			end
			if firstof and not rej[j] then
				firstof[id] = j
			end
			i = i + r.stride
		end
	end
end
if utake then
	chunked('HSET', K_UNIQ, utake)
	chunked('ZADD', K_UNIQX, uzadd)
end

-- How many of each run are stored.
local stored = 0
for _, r in ipairs(runs) do
	r.stored = r.count
	if nrej > 0 then
		for j = r.j, r.j + r.count - 1 do
			if rej[j] then
				r.stored = r.stored - 1
			end
		end
	end
	stored = stored + r.stored
end
if stored == 0 then
	local out = {0, 0}
	for j = 1, n do
		local x = rej[j] -- code 4 needs a stored instance: not here
		out[#out + 1] = x[1]
		out[#out + 1] = j
		out[#out + 1] = x[2]
		out[#out + 1] = x[3]
	end
	return out
end

-- Seq: one counter step for the call.
local last = redis.call('HINCRBY', K_CTR, 'seq', stored)
local first = last - stored + 1

-- The history entry: a run's IDs as the Go side packed them, or, for a
-- run with instances not stored, its stored ones packed here.
local entry = {}
for _, r in ipairs(runs) do
	if r.stored == r.count then
		entry[#entry + 1] = r.hist
	elseif r.stored > 0 then
		for j = r.j, r.j + r.count - 1 do
			if not rej[j] then
				entry[#entry + 1] = cmsgpack.pack(ARGV[I0 + j])
			end
		end
	end
end
local eid = xadd_at(K_HIST, 'hskew', now, cmsgpack.pack('e', now, node) .. table.concat(entry), now_ms)
local dash = string.find(eid, '-', 1, true)
local ems, hdelta = string.sub(eid, 1, dash - 1), 0
if ems ~= now_ms then
	hdelta = tonumber(ems) - math.floor(now / 1000)
end
local tail_ = cmsgpack.pack(now, hdelta, tonumber(string.sub(eid, dash + 1)))

-- The bytes of Seq as cmsgpack packs it and as be(seq, 6) writes it,
-- but the last: the same for 256 Seqs in a row (cmsgpack's widths change
-- at 128 and at multiples of 256), so they are made once per 256.
local LOWS = byte_strings()

local specs, nspec = {}, 0
local sched = {} -- scheduled set key -> score, member, ...
local sched_keys = {}
local buckets, blist = {}, {}
local kinds, qcounts, lanes = {}, {}, {}
local seq, phi, bhi = first - 1, nil, nil
for _, r in ipairs(runs) do
	if r.stored > 0 then
		local kind, queue = r.kind, r.queue
		local lk = lanes[kind]
		if not lk then
			lk = {}
			lanes[kind] = lk
		end
		local lane = lk[r.labels]
		if not lane then
			lane = lane_of(kind, r.labels)
			lk[r.labels] = lane
		end
		local back, nb, zs, nz, prio4
		if r.due then
			back = ready_back(queue, r.prio, lane)
			nb = #back
		else
			local sk = sched_key(queue)
			zs = sched[sk]
			if not zs then
				zs = {}
				sched[sk] = zs
				sched_keys[#sched_keys + 1] = sk
			end
			nz = #zs
			prio4 = be(r.prio + PRIO_BIAS, 4)
		end
		local x, i, ids = r.x, r.i, nil
		if r.stored < r.count then
			ids = {}
		end
		for j = r.j, r.j + r.count - 1 do
			if not rej[j] then
				seq = seq + 1
				local lo = seq % 256
				if lo == 0 or seq == 128 or not phi then
					local p = cmsgpack.pack(seq)
					phi = string.sub(p, 1, #p - 1)
					bhi = be(floor(seq / 256), 5)
				end
				local low = LOWS[lo]
				local id = ARGV[I0 + j]
				nspec = nspec + 2
				specs[nspec - 1] = id
				if x then
					specs[nspec] = phi .. low .. ARGV[i] .. tail_ .. ARGV[i + 2]
				else
					specs[nspec] = phi .. low .. ARGV[i] .. tail_
				end
				if back then
					nb = nb + 1
					back[nb] = ARGV[i + 1] .. bhi .. low .. id
				else
					zs[nz + 1] = ARGV[i + 1]
					zs[nz + 2] = bhi .. low .. prio4 .. id
					nz = nz + 2
				end
				if ids then
					ids[#ids + 1] = id
				end
			end
			i = i + r.stride
		end
		-- counts, bucket, wake-up
		local qc = qcounts[queue]
		if not qc then
			qc = {}
			qcounts[queue] = qc
		end
		qc[kind] = (qc[kind] or 0) + r.stored
		kinds[kind] = (kinds[kind] or 0) + r.stored
		local bkey = PREFIX .. 'kb:' .. kind .. ':' .. r.sec
		local b = buckets[bkey]
		if not b then
			b = {kind = kind, sec = r.sec, parts = {}, count = 0}
			buckets[bkey] = b
			blist[#blist + 1] = bkey
		end
		if ids then
			b.parts[#b.parts + 1] = idlist(ids)
		else
			b.parts[#b.parts + 1] = r.bucket
		end
		b.count = b.count + r.stored
		wake(queue)
	end
end
chunked('HSET', K_INST, specs)
for _, sk in ipairs(sched_keys) do
	chunked('ZADD', sk, sched[sk])
end
for _, bkey in ipairs(blist) do
	local b = buckets[bkey]
	local list = table.concat(b.parts)
	-- Only a bucket this APPEND made is new to the kind's directory: prune
	-- and delete drop a bucket and its directory entry together.
	if redis.call('APPEND', bkey, list) == #list then
		redis.call('ZADD', PREFIX .. 'kd:' .. b.kind, b.sec, b.sec)
	end
	redis.call('HINCRBY', PREFIX .. 'kn:' .. b.kind, b.sec, b.count)
end
for k, c in pairs(kinds) do
	-- The kinds set keeps every kind ever enqueued, so a kind already
	-- counted is in it.
	if redis.call('HINCRBY', K_CTR, kind_count(k), c) == c then
		redis.call('SADD', K_KINDS, k)
	end
end
-- The counts, and the queues set: a count field of a queue exists only
-- once an enqueue to the queue added it to the set (nothing takes a queue
-- out of the set or a field out of cnt), so only a field this HINCRBY
-- made (or one back at zero) needs the SADD.
for queue, qc in pairs(qcounts) do
	local new = false
	for kind, c in pairs(qc) do
		if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, queue, kind), c) == c then
			new = true
		end
	end
	if new then
		redis.call('SADD', K_QUEUES, queue)
	end
end
flush_ready()

local out = {stored, first}
if nrej > 0 then
	for j = 1, n do
		local x = rej[j]
		if x then
			if x[1] == 4 then
				-- the Seq of the first occurrence: its place among the stored
				local k = 0
				for jj = 1, x[3] do
					if not rej[jj] then
						k = k + 1
					end
				end
				x = {2, x[2], first + k - 1}
			end
			out[#out + 1] = x[1]
			out[#out + 1] = j
			out[#out + 1] = x[2]
			out[#out + 1] = x[3]
		end
	end
end
return out
