-- definition_put: create or replace a job definition if its version holds.
-- KEYS: the namespace keys (lib.lua); none of them is touched. The script
-- builds its two keys from the prefix, so they carry the namespace's one
-- hash tag and live in KEYS[1]'s slot:
--   defs  HASH  kind -> stored definition: "<version> <created us> <body>"
--               (body: the definition as JSON, without version and
--               creation time, which live in front of it)
--   defk  ZSET  every kind with a definition, score 0, for paging by kind
--               (ZRANGEBYLEX)
-- ARGV: [1] prefix, [2] kind, [3] wanted version (-1 any, 0 absent, N at
-- version N), [4] now (us), [5] body.
-- Returns {0, version, created} when stored; {1, version} when the stored
-- version (0: none) is not the wanted one; {2} when the stored record
-- cannot be decoded (nothing changes; delete it to start over).
local kind, want, now, body = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local K_DEFS, K_DEFK = PREFIX .. 'defs', PREFIX .. 'defk'
local ver, created = 0, now
local old = redis.call('HGET', K_DEFS, kind)
if old then
	local v, c = string.match(old, '^(%d+) (%-?%d+) ')
	if not v then
		return {2}
	end
	ver, created = tonumber(v), c
end
if want >= 0 and want ~= ver then
	return {1, ver}
end
ver = ver + 1
redis.call('HSET', K_DEFS, kind, ver .. ' ' .. created .. ' ' .. body)
redis.call('ZADD', K_DEFK, 0, kind)
return {0, ver, created}
