-- trigger_delete: remove a stored trigger, optionally only at one version.
-- Self-contained (not prefixed by lib.lua).
-- KEYS: [1] trig, [2] trign (see triggerKeys in triggers.go).
-- ARGV: [1] name, [2] if-version ("0": whatever version).
-- Returns {code, version}: 0 deleted, 2 no such trigger, 3 stored version
-- differs (the stored version).
local name, ifv = ARGV[1], ARGV[2]
local old = redis.call('HGET', KEYS[1], name)
if not old then
	return {2, ''}
end
local v = string.match(old, '^(%d+) ')
if ifv ~= '0' and v ~= ifv then
	return {3, v}
end
redis.call('HDEL', KEYS[1], name)
redis.call('ZREM', KEYS[2], name)
return {0, v}
