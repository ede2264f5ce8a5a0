-- progress_lookup: read the stored progress of instances.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, then instance IDs.
-- Returns one value per ID: its packed progress, '' when it has none.
-- Read-only.
local ids = argv_ids(2, 1)
local v = hmget(PREFIX .. 'prog', ids)
local out = {}
for j = 1, #ids do
	out[j] = v[j] or ''
end
return out
