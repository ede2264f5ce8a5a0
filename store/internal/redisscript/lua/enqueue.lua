-- enqueue: store new instances in state Scheduled.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] node, then per instance thirteen
--       values: ID, spec (its first ten values, see lib.lua), kind, queue,
--       priority, RunAt (us), unique key, UniqueUntil (us), CreatedAt (us),
--       required labels (as P_LABELS holds them; '' for none), metadata (as
--       P_META holds it; '' for none), shard (as P_SHARD holds it; '' for
--       none), and RunAt as be(RunAt, 7) when RunAt <= now ('' when not:
--       the Go side tells a due instance, so the script converts no time
--       to or from text for it).
-- Returns one {code, id, seq} per instance: code 0 stored (seq assigned),
-- 1 duplicate unique key (id is the holder's), 2 an instance with this ID
-- exists already (seq is its Seq; nothing changes, so a retried Enqueue is
-- idempotent), 3 the existing record under this ID is corrupt.
-- The stored instances share one history entry (value: cmsgpack 'e', now,
-- node, then their IDs), which stands for a Created and a Scheduled record
-- of each; their spec starts with Seq and ends with now and that entry's
-- ID. Each is
-- added to its kind's bucket of its CreatedAt second (and counted in its
-- kind's ctr field) and to its queue, and the queue's channel gets a
-- PUBLISH.
local now, node = tonumber(ARGV[2]), ARGV[3]
local N = 13
-- Times stay the Go side's decimal text where only their text is needed
-- (the ms of the history entry's ID, the second of a kind bucket):
-- converting a number to text costs more than most of what follows.
local now_ms = div_pow10(ARGV[2], 3)

local ids = argv_ids(4, N)
local old = hmget(K_INST, ids)

local out, stored, mine, dups = {}, {}, {}, {}
for j = 1, #ids do
	local i = 4 + (j - 1) * N
	local id, ukey, uuntil = ARGV[i], ARGV[i + 6], 0
	if ukey ~= '' then
		uuntil = tonumber(ARGV[i + 7])
	end
	if old[j] then
		local o = spec(old[j])
		if o then
			out[j] = {2, id, o[P_SEQ]}
		else
			out[j] = {3, id, 0}
		end
	elseif mine[id] then
		dups[#dups + 1] = {j, mine[id]} -- the same ID twice in one batch
	else
		local dup
		if ukey ~= '' then
			local holder = redis.call('HGET', K_UNIQ, ukey)
			if holder and holder ~= id then
				local until_
				if mine[holder] then
					until_ = mine[holder].uuntil
				else
					local h = spec(redis.call('HGET', K_INST, holder))
					until_ = h and h[P_UUNTIL] or 0
				end
				if until_ > now then
					dup = holder
				end
			end
			if not dup then
				redis.call('HSET', K_UNIQ, ukey, id)
				redis.call('ZADD', K_UNIQX, uuntil, ukey)
			end
		end
		if dup then
			out[j] = {1, dup, 0}
		else
			local e = {id = id, i = i, j = j, uuntil = uuntil}
			mine[id] = e
			stored[#stored + 1] = e
			out[j] = e
		end
	end
end
if #stored == 0 then
	return out
end

-- Seq: one counter step for the batch.
local last = redis.call('HINCRBY', K_CTR, 'seq', #stored)
local entry = {}
for k, e in ipairs(stored) do
	e.seq = last - #stored + k
	entry[k] = cmsgpack.pack(e.id)
end
local eid = xadd_at(K_HIST, 'hskew', now, cmsgpack.pack('e', now, node) .. table.concat(entry), now_ms)
local dash = string.find(eid, '-', 1, true)
local ems, hdelta = string.sub(eid, 1, dash - 1), 0
if ems ~= now_ms then
	hdelta = tonumber(ems) - math.floor(now / 1000)
end
local tail_ = cmsgpack.pack(now, hdelta, tonumber(string.sub(eid, dash + 1)))

local specs, kinds, buckets, blist = {}, {}, {}, {}
-- Per-instance work is kept to what differs between instances: the
-- bucket of a (kind, second), the lane of a (kind, labels) and the count
-- of a (queue, kind) are looked up in tables, not built again as strings.
local bykind, lanes, qcounts = {}, {}, {}
for _, e in ipairs(stored) do
	local i = e.i
	local id, kind, queue = e.id, ARGV[i + 2], ARGV[i + 3]
	local prio, runat7 = tonumber(ARGV[i + 4]), ARGV[i + 12]
	specs[#specs + 1] = id
	local labels, meta, shard = ARGV[i + 9], ARGV[i + 10], ARGV[i + 11]
	local lspec = ''
	if labels ~= '' or meta ~= '' or shard ~= '' then
		lspec = cmsgpack.pack(labels)
	end
	if meta ~= '' or shard ~= '' then
		lspec = lspec .. cmsgpack.pack(meta)
	end
	if shard ~= '' then
		lspec = lspec .. cmsgpack.pack(shard)
	end
	specs[#specs + 1] = cmsgpack.pack(e.seq) .. ARGV[i + 1] .. tail_ .. lspec
	local qc = qcounts[queue]
	if not qc then
		qc = {}
		qcounts[queue] = qc
	end
	qc[kind] = (qc[kind] or 0) + 1
	local sec = div_pow10(ARGV[i + 8], 6) or num(math.floor(tonumber(ARGV[i + 8]) / 1000000))
	local kb = bykind[kind]
	if not kb then
		kb, kinds[kind] = {}, 0
		bykind[kind] = kb
		lanes[kind] = {}
	end
	kinds[kind] = kinds[kind] + 1
	local b = kb[sec]
	if not b then
		local bkey = PREFIX .. 'kb:' .. kind .. ':' .. sec
		b = {kind = kind, sec = sec, ids = {}}
		kb[sec] = b
		buckets[bkey] = b
		blist[#blist + 1] = bkey
	end
	b.ids[#b.ids + 1] = id
	local lane = lanes[kind][labels]
	if not lane then
		lane = lane_of(kind, labels)
		lanes[kind][labels] = lane
	end
	-- place, with the due check made by the Go side
	if runat7 ~= '' then
		push_ready(id, queue, prio, false, nil, e.seq, lane, runat7)
	else
		redis.call('ZADD', sched_key(queue), ARGV[i + 5], sched_member(id, e.seq, prio))
	end
	wake(queue)
	out[e.j] = {0, id, e.seq}
end
for _, d in ipairs(dups) do
	out[d[1]] = {2, d[2].id, d[2].seq}
end
chunked('HSET', K_INST, specs)
for _, bkey in ipairs(blist) do
	local b = buckets[bkey]
	local list = idlist(b.ids)
	-- Only a bucket this APPEND made is new to the kind's directory: prune
	-- and delete drop a bucket and its directory entry together.
	if redis.call('APPEND', bkey, list) == #list then
		redis.call('ZADD', PREFIX .. 'kd:' .. b.kind, b.sec, b.sec)
	end
	redis.call('HINCRBY', PREFIX .. 'kn:' .. b.kind, b.sec, #b.ids)
end
for k, n in pairs(kinds) do
	-- The kinds set keeps every kind ever enqueued, so a kind already
	-- counted is in it.
	if redis.call('HINCRBY', K_CTR, kind_count(k), n) == n then
		redis.call('SADD', K_KINDS, k)
	end
end
-- The counts, and the queues set: a count field of a queue exists only
-- once an enqueue to the queue added it to the set (nothing takes a queue
-- out of the set or a field out of cnt), so only a field this HINCRBY
-- made (or one back at zero) needs the SADD.
for queue, qc in pairs(qcounts) do
	local new = false
	for kind, n in pairs(qc) do
		if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, queue, kind), n) == n then
			new = true
		end
	end
	if new then
		redis.call('SADD', K_QUEUES, queue)
	end
end
flush_ready()
return out
