-- of_instance: read one instance's spec, state, and history or logs.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] instance ID, [3] what: 'h' history, 'l' logs.
-- Returns {spec, state, entries}: spec and state as stored ('' when
-- missing); entries are the raw values of the stream entries holding the
-- instance's records, oldest first ('h': its enqueue entry, named by the
-- spec's tail, then the entries listed in the state's refs; 'l': the list
-- l:<id>). The entries hold other instances' records too; the caller
-- picks. Entries removed by retention are left out. Read-only.
local id, what = ARGV[2], ARGV[3]
local craw = redis.call('HGET', K_INST, id) or ''
local raw = redis.call('HGET', K_ST, id) or ''
local eids, key = {}, K_HIST
if what == 'h' then
	local p = spec(craw)
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
	key = K_LOGS
	eids = redis.call('LRANGE', PREFIX .. 'l:' .. id, 0, -1)
end
local out = {}
for _, eid in ipairs(eids) do
	local e = redis.call('XRANGE', key, eid, eid)
	if e[1] then
		out[#out + 1] = e[1][2][2]
	end
end
return {craw, raw, out}
