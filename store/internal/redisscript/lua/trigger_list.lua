-- trigger_list: one page of stored triggers in name order, read at one
-- instant. Self-contained (not prefixed by lib.lua).
-- KEYS: [1] trig, [2] trign (see trigger_put.lua).
-- ARGV: [1] the name to start after ("" from the first), [2] page size.
-- Returns the stored values of up to page-size triggers, then, when more
-- follow, the last name of the page: {value..., next} (next is "" when
-- this is the last page).
local after, n = ARGV[1], tonumber(ARGV[2])
local from = '-'
if after ~= '' then
	from = '(' .. after
end
local names = redis.call('ZRANGEBYLEX', KEYS[2], from, '+', 'LIMIT', 0, n + 1)
local next = ''
if #names > n then
	names[n + 1] = nil
	next = names[n]
end
local out = {}
if #names > 0 then
	out = redis.call('HMGET', KEYS[1], unpack(names))
end
local res = {}
for i = 1, #names do
	if out[i] then
		res[#res + 1] = out[i]
	end
end
res[#res + 1] = next
return res
