-- document_delete: remove a named document, optionally only at one
-- version. Self-contained (not prefixed by lib.lua).
-- KEYS: [1] doc:<collection>, [2] docn:<collection>, [3] docg:<collection>
--       (see document_put.lua).
-- ARGV: [1] name, [2] if-version ("0": whatever version).
-- Returns {code, version}: 0 deleted, 2 no such document, 3 stored
-- version differs (the stored version).
local name, ifv = ARGV[1], ARGV[2]
local old = redis.call('HGET', KEYS[1], name)
if not old then
	return {2, ''}
end
local v = string.match(old, '^(%d+) ') or '-'
if ifv ~= '0' and v ~= ifv then
	return {3, v}
end
redis.call('HDEL', KEYS[1], name)
redis.call('ZREM', KEYS[2], name)
if v ~= '-' and tonumber(v) > tonumber(redis.call('GET', KEYS[3]) or '0') then
	redis.call('SET', KEYS[3], v)
end
return {0, v}
