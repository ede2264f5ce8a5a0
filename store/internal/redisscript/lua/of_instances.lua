-- of_instances: read instances' specs and states with their history or
-- log entries.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] what: 'h' history, 'l' logs, then instance IDs.
-- Returns {rows, entries}. rows holds three values per ID: its spec and
-- its state as stored ('' when missing), and the indexes (1-based, into
-- entries) of the stream entries with its records, oldest first ('h': its
-- enqueue entry, named by the spec's tail, then the entries listed in the
-- state's refs; 'l': the list l:<id>). entries are the raw values of those
-- entries, each once however many of the instances refer to it (the
-- instances of one Enqueue or one Claim share an entry). An entry holds
-- other instances' records too; the caller picks. Entries removed by
-- retention are left out. Read-only.
local what = ARGV[2]
local key = K_HIST
if what == 'l' then
	key = K_LOGS
end
local ids = argv_ids(3, 1)
local specs, sts = hmget(K_INST, ids), hmget(K_ST, ids)
local rows, entries, index = {}, {}, {}

-- ref returns the index of entry eid in entries, reading it the first
-- time; nil when retention removed it.
local function ref(eid)
	local i = index[eid]
	if i == nil then
		local e = redis.call('XRANGE', key, eid, eid)
		i = false
		if e[1] then
			entries[#entries + 1] = e[1][2][2]
			i = #entries
		end
		index[eid] = i
	end
	return i or nil
end

for j, id in ipairs(ids) do
	local craw, raw = specs[j] or '', sts[j] or ''
	local eids = {}
	if what == 'h' then
		local p = craw ~= '' and spec(craw)
		if p and p[P_HSEQ] >= 0 then
			eids[1] = num(math.floor(p[P_ENQ] / 1000) + p[P_HDELTA]) .. '-' .. num(p[P_HSEQ])
		end
		local t = raw ~= '' and state(raw)
		if t then
			for eid in string.gmatch(t[T_REFS], '%S+') do
				eids[#eids + 1] = eid
			end
		end
	else
		eids = redis.call('LRANGE', PREFIX .. 'l:' .. id, 0, -1)
	end
	local refs = {}
	for _, eid in ipairs(eids) do
		refs[#refs + 1] = ref(eid)
	end
	rows[#rows + 1] = craw
	rows[#rows + 1] = raw
	rows[#rows + 1] = refs
end
return {rows, entries}
