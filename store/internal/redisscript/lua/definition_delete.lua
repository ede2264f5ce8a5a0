-- definition_delete: remove a job definition if its version holds.
-- KEYS: the namespace keys (lib.lua); none of them is touched. The keys
-- defs and defk are built from the prefix, as in definition_put.lua
-- (which describes them), and share KEYS[1]'s hash tag.
-- ARGV: [1] prefix, [2] kind, [3] wanted version (0: any).
-- Returns {0} when removed; {1, version} when the stored version is not
-- the wanted one; {3} when there is no definition of kind. A record that
-- cannot be decoded is removed when no version is wanted, else {2}.
local kind, want = ARGV[2], tonumber(ARGV[3])
local K_DEFS, K_DEFK = PREFIX .. 'defs', PREFIX .. 'defk'
local old = redis.call('HGET', K_DEFS, kind)
if not old then
	return {3}
end
if want > 0 then
	local v = string.match(old, '^(%d+) ')
	if not v then
		return {2}
	end
	if tonumber(v) ~= want then
		return {1, tonumber(v)}
	end
end
redis.call('HDEL', K_DEFS, kind)
redis.call('ZREM', K_DEFK, kind)
return {0}
