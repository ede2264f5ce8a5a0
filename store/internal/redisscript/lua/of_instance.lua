-- of_instance: read one instance's record, history and logs in one call.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] instance ID, [3] what: 'h' history, 'l' logs.
-- Returns {record, entries}: record is the stored value ('' when missing);
-- entries are the raw values of the instance's stream entries, oldest
-- first ('h': the IDs kept in the record; 'l': the list l:<id>). Entries
-- removed by retention are left out. Read-only.
local id, what = ARGV[2], ARGV[3]
local raw = redis.call('HGET', K_INST, id) or ''
local eids, key = {}, K_HIST
if what == 'h' then
	local r = decode(raw)
	if r then
		for eid in string.gmatch(r[F_HIST], '%S+') do
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
return {raw, out}
