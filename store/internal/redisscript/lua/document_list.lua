-- document_list: one page of a collection's documents in name order, read
-- at one instant. Self-contained (not prefixed by lib.lua).
-- KEYS: [1] doc:<collection>, [2] docn:<collection> (see document_put.lua).
-- ARGV: [1] the lower bound of the names, [2] the upper bound, both as
--       ZRANGEBYLEX takes them ('-', '+', '[name', '(name'), [3] page
--       size.
-- Returns a flat list of name, stored value, name, stored value ... for
-- up to page-size documents, then the last name of the page when more
-- follow, else "".
local n = tonumber(ARGV[3])
local names = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, n + 1)
local next = ''
if #names > n then
	names[n + 1] = nil
	next = names[n]
end
local res = {}
if #names > 0 then
	local vals = redis.call('HMGET', KEYS[1], unpack(names))
	for i = 1, #names do
		if vals[i] then
			res[#res + 1] = names[i]
			res[#res + 1] = vals[i]
		end
	end
end
res[#res + 1] = next
return res
