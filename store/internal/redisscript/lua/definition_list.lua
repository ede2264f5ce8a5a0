-- definition_list: one page of job definitions, sorted by kind.
-- KEYS: the namespace keys (lib.lua); none of them is read. The keys defs
-- and defk are built from the prefix, as in definition_put.lua (which
-- describes them), and share KEYS[1]'s hash tag.
-- ARGV: [1] prefix, [2] cursor: the kinds after it are listed ("" from the
-- first), [3] page size.
-- Returns a flat list: kind, stored definition, kind, stored ... (at most
-- the page size pairs), in byte order of kind.
local after, limit = ARGV[2], tonumber(ARGV[3])
local K_DEFS, K_DEFK = PREFIX .. 'defs', PREFIX .. 'defk'
local min = '-'
if after ~= '' then
	min = '(' .. after
end
local kinds = redis.call('ZRANGEBYLEX', K_DEFK, min, '+', 'LIMIT', 0, limit)
local out = {}
if #kinds == 0 then
	return out
end
local vals = redis.call('HMGET', K_DEFS, unpack(kinds))
for i, k in ipairs(kinds) do
	if vals[i] then
		out[#out + 1] = k
		out[#out + 1] = vals[i]
	end
end
return out
