-- enqueue: store new instances in state Scheduled.
-- KEYS: seven of the namespace keys (lib.lua), the ones it uses: inst,
--   ctr, hist, uniq, uniqx, kinds, queues (Keys.Enqueue). Every other key
--   it writes is built from the prefix, in the namespace's one hash tag.
-- ARGV: (made by core.go's EnqueueArgs)
--   [1] prefix, [2] now (us), [3] node, [4] n, the number of instances,
--   [5] flags of the call: 'r' when an ID occurs more than once among the
--       instances, 'k' when a unique key does ('' for neither),
--   [6] C, the number of classes, [7] B, the number of kind buckets,
--   [8] the history entry's value when all n instances are stored:
--       cmsgpack.pack('e', now, node), then each ID as cmsgpack packs
--       it, in order (the Go side writes the bytes cmsgpack would),
--   then the n IDs, in order,
--   then C classes of six values: kind, queue, priority, labels (as
--       P_LABELS holds them; '' for none), the second of CreatedAt
--       (decimal), and a digit of flags: 1 due (ready at once), 2 each instance
--       carries a spec tail, 4 each carries a unique key,
--   then B buckets of four values: kind, second, the number of the
--       instances in it, its part (each ID behind its length in 2
--       bytes, in order),
--   then runs of consecutive instances of one class: the class's number
--       (1 to C, decimal), the number of instances, then per instance its
--       spec (the ten values the Go side writes, see lib.lua), its RunAt
--       (be(RunAt, 7) when due, else decimal), with flag 2 the spec's
--       tail (P_LABELS, P_META, P_SHARD, P_TASK as the spec keeps them), with
--       flag 4 its unique key and UniqueUntil (us).
-- What is the same for many instances is sent and worked out once; per
-- instance the script builds its record and its ready-list or scheduled
-- entry, and adds them to a few variadic calls. The history entry's and
-- the buckets' parts are the Go side's when every instance is stored, and
-- made here from the stored ones when not.
-- Returns {stored, first seq, then code, j, id, seq per instance not
-- stored}: the instances stored have Seqs first, first + 1, ... in their
-- order; j is an instance's place (1-based), code 1 duplicate unique key
-- (id is the holder's), 2 an instance with this ID exists already (seq is
-- its Seq; nothing changes, so a retried Enqueue is idempotent), 3 the
-- existing record under this ID is corrupt.
-- The stored instances share one history entry (value: cmsgpack 'e', now,
-- node, then their IDs), which stands for a Created and a Scheduled record
-- of each; their spec starts with Seq and ends with now and that entry's
-- ID. Each is added to its kind's bucket of its CreatedAt second and to
-- its queue, and counted in cnt, and the queue's channel gets a PUBLISH.
-- (No count per kind in ctr: a namespace written before issue 39 keeps
-- its k:<kind> fields until prune or delete drop them; nothing reads
-- them.)
-- begin_head took the twelve keys' places: the seven are set here, the
-- others are nil (this script touches none of them).
K_INST, K_ST, K_CTR, K_HIST, K_LEASE, K_RUN = KEYS[1], nil, KEYS[2], KEYS[3], nil, nil
K_UNIQ, K_UNIQX, K_KINDS, K_QUEUES, K_LOGS, K_LATE = KEYS[4], KEYS[5], KEYS[6], KEYS[7], nil, nil
local now, node = tonumber(ARGV[2]), ARGV[3]
-- Times stay the Go side's decimal text where only their text is needed
-- (the ms of the history entry's ID): converting a number to text costs
-- more than most of what follows.
local now_ms = div_pow10(ARGV[2], 3)
local n, C, B = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local I0 = 8 -- ARGV[I0 + j] is instance j's ID
local C0 = I0 + n -- class c's values start at ARGV[C0 + 6c - 5]
local B0 = C0 + 6 * C -- bucket b's at ARGV[B0 + 4b - 3]
local R0 = B0 + 4 * B + 1 -- the first run

-- rej[j] = {code, id, seq} for an instance not stored (code 4: a later
-- occurrence of an ID stored by this call; seq is the first's place).
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

-- The classes, by their number as the runs give it.
local classes = {}
for c = 1, C do
	local i = C0 + 6 * c - 5
	local f = byte(ARGV[i + 5]) - 48
	local x, u = f % 4 >= 2, f >= 4
	-- Every field the script sets later is in the constructor (false
	-- until set), so that the table is made at its size once.
	local cl = {kind = ARGV[i], queue = ARGV[i + 1], prio = ARGV[i + 2], labels = ARGV[i + 3], sec = ARGV[i + 4],
		due = f % 2 == 1, x = x, u = u, stored = 0, stride = 2 + (x and 1 or 0) + (u and 2 or 0),
		back = false, zs = false, prio4 = false, bucket = false}
	classes[num(c)] = cl
end

-- Unique keys (only for runs of a class with flag 4) and repeated IDs
-- (only when the Go side saw some): one HMGET of the keys of a run, the
-- decisions in order, one HSET and one ZADD of the keys taken. With 'k'
-- a key taken earlier in the call counts; with 'r' a later occurrence of
-- an ID stored by this call is reported as existing, with the Seq the
-- first got, and a later occurrence of one not stored is tried again.
local firstof, held, uuntil_of
if string.find(ARGV[5], 'r', 1, true) then
	firstof = {}
end
if string.find(ARGV[5], 'k', 1, true) then
	held, uuntil_of = {}, {}
end
-- (utake and uzadd are made at the first key taken: a table costs about
-- as much as a tonumber, and most calls take none.)
local utake, uzadd, nu = nil, nil, 0
do
	local i, j = R0, 1
	while j <= n do
		local cl, cnt = classes[ARGV[i]], tonumber(ARGV[i + 1])
		i = i + 2
		local stride, u = cl.stride, cl.u
		if u or firstof then
			local v
			if u then
				local ukeys, k = {}, 0
				for q = i + stride - 2, i + stride * cnt - 2, stride do
					k = k + 1
					ukeys[k] = ARGV[q]
				end
				if k <= 1000 then
					v = redis.call('HMGET', K_UNIQ, unpack(ukeys))
				else
					v = hmget(K_UNIQ, ukeys)
				end
			end
			for k = 1, cnt do
				local jj = j + k - 1
				local id = ARGV[I0 + jj]
				if firstof and not rej[jj] and firstof[id] then
					rej[jj] = {4, id, firstof[id]}
					nrej = nrej + 1
				end
				if u and not rej[jj] then
					local q = i + stride * k - 2
					local ukey = ARGV[q]
					local holder = v[k]
					if held and held[ukey] ~= nil then
						holder = held[ukey]
					end
					local dup
					if holder and holder ~= id then
						local until_ = uuntil_of and uuntil_of[holder]
						if not until_ then
							local h = spec(redis.call('HGET', K_INST, holder))
							until_ = h and h[P_UUNTIL] or 0
						end
						if until_ > now then
							dup = holder
						end
					end
					if dup then
						rej[jj] = {1, dup, 0}
						nrej = nrej + 1
					else
						if held then
							held[ukey] = id
							uuntil_of[id] = tonumber(ARGV[q + 1])
						end
						if not utake then
							utake, uzadd = {}, {}
						end
						nu = nu + 2
						utake[nu - 1], utake[nu] = ukey, id
						uzadd[nu - 1], uzadd[nu] = ARGV[q + 1], ukey
					end
				end
				if firstof and not rej[jj] then
					firstof[id] = jj
				end
			end
		end
		i = i + stride * cnt
		j = j + cnt
	end
end
if nu > 0 then
	chunked('HSET', K_UNIQ, utake)
	chunked('ZADD', K_UNIQX, uzadd)
end

local stored = n - nrej
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
local last = redis.call('HINCRBY', K_CTR, 'seq', num(stored))
local first = last - stored + 1

-- The history entry.
local entry = ARGV[8]
if nrej > 0 then
	local parts = {cmsgpack.pack('e', now, node)}
	for j = 1, n do
		if not rej[j] then
			parts[#parts + 1] = cmsgpack.pack(ARGV[I0 + j])
		end
	end
	entry = table.concat(parts)
end
local eid = xadd_at(K_HIST, 'hskew', now, entry, now_ms)
local dash = string.find(eid, '-', 1, true)
local ems, hdelta = string.sub(eid, 1, dash - 1), 0
if ems ~= now_ms then
	hdelta = tonumber(ems) - math.floor(now / 1000)
end
local tail_ = cmsgpack.pack(now, hdelta, tonumber(string.sub(eid, dash + 1)))

-- Kind buckets made here (only with instances not stored): per kind and
-- second, the stored IDs in order.
local rebuilt, rlist
if nrej > 0 then
	rebuilt, rlist = {}, {}
end

-- The bytes of Seq as cmsgpack packs it and as be(seq, 6) writes it,
-- but the last, are the same for 256 Seqs in a row (cmsgpack's widths
-- change at 128 and at multiples of 256): made once per 256, by seq_hi.
local LOWS = byte_strings()
-- seq_hi returns those bytes for s: cmsgpack's (a positive integer in
-- the fewest bytes: below 128 one byte, then 0xcc, 0xcd or 0xce and 1, 2
-- or 4 bytes; from 2^32 on left to cmsgpack) and be(s, 6)'s, written
-- with one string.char each (be takes a table for 5 bytes).
local function seq_hi(s)
	local b1, b2, b3 = floor(s / 256) % 256, floor(s / 65536) % 256, floor(s / 16777216) % 256
	local b4, b5 = floor(s / 4294967296) % 256, floor(s / 1099511627776) % 256
	local p
	if s < 128 then
		p = ''
	elseif s < 256 then
		p = '\204'
	elseif s < 65536 then
		p = char(205, b1)
	elseif s < 4294967296 then
		p = char(206, b3, b2, b1)
	else
		p = cmsgpack.pack(s)
		p = string.sub(p, 1, #p - 1)
	end
	return p, char(b5, b4, b3, b2, b1)
end
local specs, nspec = {}, 0
-- The tables below are made when first needed: most calls have one
-- class, due, and no scheduled entry.
local sched, sched_keys -- scheduled set key -> score, member, ...
local lanes -- kind -> labels -> lane, for calls of several classes
local seq, phi, bhi = first - 1, nil, nil
do
	local i, j = R0, 1
	while j <= n do
		local cl, cnt = classes[ARGV[i]], tonumber(ARGV[i + 1])
		i = i + 2
		if not cl.back and not cl.zs then
			-- first use of the class: its lane and where its entries go
			local lane
			if C == 1 then
				lane = lane_of(cl.kind, cl.labels)
			else
				lanes = lanes or {}
				local lk = lanes[cl.kind]
				if not lk then
					lk = {}
					lanes[cl.kind] = lk
				end
				lane = lk[cl.labels]
				if not lane then
					lane = lane_of(cl.kind, cl.labels)
					lk[cl.labels] = lane
				end
			end
			if cl.due then
				cl.back = ready_back(cl.queue, tonumber(cl.prio), lane)
			else
				if not sched then
					sched, sched_keys = {}, {}
				end
				local sk = sched_key(cl.queue)
				local zs = sched[sk]
				if not zs then
					zs = {}
					sched[sk] = zs
					sched_keys[#sched_keys + 1] = sk
				end
				cl.zs = zs
				cl.prio4 = be(tonumber(cl.prio) + PRIO_BIAS, 4)
			end
			if rebuilt then
				local bkey = PREFIX .. 'kb:' .. cl.kind .. ':' .. cl.sec
				local b = rebuilt[bkey]
				if not b then
					b = {kind = cl.kind, sec = cl.sec, ids = {}}
					rebuilt[bkey] = b
					rlist[#rlist + 1] = bkey
				end
				cl.bucket = b.ids
			end
		end
		local back, zs, prio4, x, ids = cl.back, cl.zs, cl.prio4, cl.x, cl.bucket
		local nb, nz = back and #back, zs and #zs
		local stride, done = cl.stride, 0
		for jj = j, j + cnt - 1 do
			if not rej[jj] then
				seq = seq + 1
				done = done + 1
				local lo = seq % 256
				if lo == 0 or seq == 128 or not phi then
					phi, bhi = seq_hi(seq)
				end
				local low = LOWS[lo]
				local id = ARGV[I0 + jj]
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
			i = i + stride
		end
		cl.stored = cl.stored + done
		j = j + cnt
	end
end
chunked('HSET', K_INST, specs)
if sched_keys then
	for _, sk in ipairs(sched_keys) do
		chunked('ZADD', sk, sched[sk])
	end
end

-- Buckets: only a bucket this APPEND made is new to the kind's directory
-- (prune and delete drop a bucket and its directory entry together).
local function bucket(kind, sec, list, count)
	if redis.call('APPEND', PREFIX .. 'kb:' .. kind .. ':' .. sec, list) == #list then
		redis.call('ZADD', PREFIX .. 'kd:' .. kind, sec, sec)
	end
	redis.call('HINCRBY', PREFIX .. 'kn:' .. kind, sec, count)
end
if rebuilt then
	for _, bkey in ipairs(rlist) do
		local b = rebuilt[bkey]
		if #b.ids > 0 then
			bucket(b.kind, b.sec, idlist(b.ids), #b.ids)
		end
	end
else
	for b = 1, B do
		local i = B0 + 4 * b - 3
		bucket(ARGV[i], ARGV[i + 1], ARGV[i + 3], ARGV[i + 2])
	end
end

-- The counts, the kinds set and the queues set, and the wake-ups.
-- The kinds and queues sets keep every kind and queue ever enqueued. A
-- Scheduled count field of (queue, kind) exists only once an enqueue
-- added both to the sets (nothing takes a name out of a set or a field
-- out of cnt), so only a field this HINCRBY made (or one back at zero)
-- needs the SADDs. Counts go to redis.call as text (num): Redis formats
-- a Lua number with snprintf, which costs about as much as a small
-- command.
if C == 1 then
	-- One class (a lone call, and most shared ones): its counts directly,
	-- without gathering them.
	local cl = classes['1']
	local c = cl.stored
	if c > 0 then
		wake(cl.queue)
		if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, cl.queue, cl.kind), num(c)) == c then
			redis.call('SADD', K_KINDS, cl.kind)
			redis.call('SADD', K_QUEUES, cl.queue)
		end
	end
else
	local newkinds, qcounts = {}, {}
	for c = 1, C do
		local cl = classes[num(c)]
		if cl.stored > 0 then
			local qc = qcounts[cl.queue]
			if not qc then
				qc = {}
				qcounts[cl.queue] = qc
			end
			qc[cl.kind] = (qc[cl.kind] or 0) + cl.stored
			wake(cl.queue)
		end
	end
	for queue, qc in pairs(qcounts) do
		local new = false
		for kind, c in pairs(qc) do
			if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, queue, kind), num(c)) == c then
				new = true
				newkinds[#newkinds + 1] = kind
			end
		end
		if new then
			redis.call('SADD', K_QUEUES, queue)
		end
	end
	if #newkinds > 0 then
		chunked('SADD', K_KINDS, newkinds)
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
