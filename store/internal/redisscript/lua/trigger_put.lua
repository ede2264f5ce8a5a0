-- trigger_put: create or replace a stored trigger, compare-and-set on its
-- version. Self-contained (not prefixed by lib.lua): it touches only the
-- three keys it is given.
-- KEYS: [1] trig  HASH   trigger name -> "<version> <created> <json>"
--                        (version: decimal; created: the creation time in
--                        ns since the epoch, decimal; json: the trigger
--                        without version and times)
--       [2] trign ZSET   trigger names, score 0, for paging in name order
--       [3] trigv STRING the last version given in the namespace (INCR)
-- ARGV: [1] name, [2] if-version ("0" creates, "-1" creates or replaces
--       whatever is stored), [3] now (ns, decimal), [4] json.
-- Returns {code, version, created}: code 0 stored (the new version and the
-- creation time kept), 1 exists already (its version), 2 no such trigger,
-- 3 stored version differs (the stored version).
local name, ifv, now, body = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local old = redis.call('HGET', KEYS[1], name)
local created = now
if old then
	local v, c = string.match(old, '^(%d+) (%d+) ')
	if ifv == '0' then
		return {1, v, ''}
	end
	if ifv ~= '-1' and v ~= ifv then
		return {3, v, ''}
	end
	created = c
elseif ifv ~= '0' and ifv ~= '-1' then
	return {2, '', ''}
end
local ver = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], name, ver .. ' ' .. created .. ' ' .. body)
redis.call('ZADD', KEYS[2], 0, name)
return {0, tostring(ver), created}
