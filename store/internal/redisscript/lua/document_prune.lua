-- document_prune: delete the first documents of a collection in name
-- order (store.PruneDocumentsParams). Self-contained (not prefixed by
-- lib.lua).
-- KEYS: [1] doc:<collection>, [2] docn:<collection>, [3] docg:<collection>
--       (see document_put.lua): the greatest version deleted is kept there.
-- ARGV: [1] before: names that sort before it go ("" for no such rule),
--       [2] keep: all but the keep last go (0 for no such rule),
--       [3] limit: at most this many go.
-- Returns how many documents it deleted.
local before, keep, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = 0
if before ~= '' then
	n = redis.call('ZLEXCOUNT', KEYS[2], '-', '(' .. before)
end
if keep > 0 then
	local extra = redis.call('ZCARD', KEYS[2]) - keep
	if extra > n then
		n = extra
	end
end
if n > limit then
	n = limit
end
if n <= 0 then
	return 0
end
local names = redis.call('ZRANGE', KEYS[2], 0, n - 1)
local gone = tonumber(redis.call('GET', KEYS[3]) or '0')
local top = gone
for i = 1, #names, 500 do
	local batch = {unpack(names, i, math.min(i + 499, #names))}
	local vals = redis.call('HMGET', KEYS[1], unpack(batch))
	for _, val in ipairs(vals) do
		local v = val and tonumber(string.match(val, '^(%d+) '))
		if v and v > top then
			top = v
		end
	end
	redis.call('HDEL', KEYS[1], unpack(batch))
end
if top > gone then
	redis.call('SET', KEYS[3], string.format('%d', top))
end
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - 1)
return n
