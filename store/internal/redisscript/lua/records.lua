-- records: read the spec and state of instances.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, then instance IDs.
-- Returns a flat list spec1, state1, spec2, ... with '' for what is
-- missing (no spec: no such instance; no state: not run yet). Read-only.
local ids = {}
for i = 2, #ARGV do
	ids[#ids + 1] = ARGV[i]
end
local out = {}
for i = 1, #ids, 1000 do
	local part = {unpack(ids, i, math.min(i + 999, #ids))}
	local specs = redis.call('HMGET', K_INST, unpack(part))
	local sts = redis.call('HMGET', K_ST, unpack(part))
	for j = 1, #part do
		out[#out + 1] = specs[j] or ''
		out[#out + 1] = sts[j] or ''
	end
end
return out
