-- events: read the history stream for the event feed (store.Events).
-- KEYS: the namespace keys (lib.lua); it reads only KEYS[4] (hist) and
-- KEYS[1] (inst).
-- ARGV: [1] prefix, [2] the entry ID to read from, inclusive ('' to read
--       nothing: only the stream's bounds), [3] count.
-- Returns {last, deleted, entries, meta}: the stream's last generated ID
-- and the largest ID ever deleted from it ('0-0' for none, or when the
-- stream does not exist), up to count entries from ARGV[2] as a flat list
-- {id, value, ...}, and the kind and queue of every instance those entries
-- hold records of, with the attempt its state is at and when that attempt
-- became ready (0, 0 when it is Scheduled again or never ran), flat
-- {instance, kind, queue, attempt, ready (us), ...} (instances that are
-- gone are left out). Read in one script, the bounds and the entries agree:
-- when deleted is not after ARGV[2], no entry after ARGV[2] was deleted
-- before this read, so the entries are all there are. Read-only.
local from, count = ARGV[2], tonumber(ARGV[3])
if redis.call('EXISTS', K_HIST) == 0 then
	return {'0-0', '0-0', {}, {}}
end
local last, deleted = '0-0', '0-0'
local info = redis.call('XINFO', 'STREAM', K_HIST)
for i = 1, #info, 2 do
	if info[i] == 'last-generated-id' then
		last = info[i + 1]
	elseif info[i] == 'max-deleted-entry-id' then
		deleted = info[i + 1]
	end
end
local flat, meta = {}, {}
if from ~= '' then
	local es = redis.call('XRANGE', K_HIST, from, '+', 'COUNT', count)
	local ids, seen = {}, {}
	for _, e in ipairs(es) do
		local v = e[2][2]
		flat[#flat + 1] = e[1]
		flat[#flat + 1] = v
		local ok, a = pcall(function() return {cmsgpack.unpack(v)} end)
		if ok then
			for i = 4, #a do
				local id = a[i]
				if type(id) == 'table' then
					id = id[1]
				end
				if type(id) == 'string' and not seen[id] then
					seen[id] = true
					ids[#ids + 1] = id
				end
			end
		end
	end
	local specs, sts = hmget(K_INST, ids), hmget(K_ST, ids)
	for i, id in ipairs(ids) do
		if specs[i] then
			-- Seq, kind, queue, args, priority and RunAt lead the spec:
			-- decode only those.
			local ok, _, _, kind, queue, _, _, runat = pcall(cmsgpack.unpack_limit, specs[i], 6)
			if ok and type(kind) == 'string' and type(queue) == 'string' then
				-- The attempt whose ready time is known and that time: the
				-- state's attempt and RunAt (0: the spec's) while it is not
				-- Scheduled again (then RunAt is the next attempt's).
				local att, ready = 0, 0
				local t = sts[i] and state(sts[i])
				if t and t[T_STATE] ~= S_SCHEDULED and t[T_ATT] > 0 then
					att, ready = t[T_ATT], t[T_RUNAT]
					if ready == 0 and type(runat) == 'number' then
						ready = runat
					end
				end
				meta[#meta + 1] = id
				meta[#meta + 1] = kind
				meta[#meta + 1] = queue
				meta[#meta + 1] = num(att)
				meta[#meta + 1] = num(ready)
			end
		end
	end
end
return {last, deleted, flat, meta}
