-- order_keys: where instances stand in a lookup's order (newest first by
-- CreatedAt, then Seq), without reading them whole.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, then stored instance IDs.
-- Returns a flat list created1, seq1, created2, ... (CreatedAt in us and
-- Seq, as decimal strings, from each spec's first eleven values); '0', '0'
-- for an instance that is gone or whose spec does not decode. Read-only.
local ids = argv_ids(2, 1)
local specs = hmget(K_INST, ids)
local out = {}
for j = 1, #ids do
	local c, s = 0, 0
	if specs[j] then
		local ok, _, seq, _, _, _, _, _, _, _, _, _, created = pcall(cmsgpack.unpack_limit, specs[j], 11)
		if ok and type(seq) == 'number' and type(created) == 'number' then
			c, s = created, seq
		end
	end
	out[#out + 1] = num(c)
	out[#out + 1] = num(s)
end
return out
