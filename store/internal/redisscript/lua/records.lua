-- records: read the spec and state of instances.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, then instance IDs.
-- Returns a flat list spec1, state1, spec2, ... with '' for what is
-- missing (no spec: no such instance; no state: not run yet). Read-only.
local ids = argv_ids(2, 1)
local specs, sts = hmget(K_INST, ids), hmget(K_ST, ids)
local out = {}
for j = 1, #ids do
	out[#out + 1] = specs[j] or ''
	out[#out + 1] = sts[j] or ''
end
return out
