-- document_put: create or replace a named document (store.Documents),
-- compare-and-set on its version. Self-contained (not prefixed by
-- lib.lua): it touches only the three keys it is given, all under the
-- namespace's hash tag.
-- KEYS: [1] doc:<collection>  HASH   name -> "<version> <created> <updated> <body>"
--                                    (version: decimal; created, updated: ns
--                                    since the epoch, decimal; body: the
--                                    document's JSON as given)
--       [2] docn:<collection> ZSET   the collection's names, score 0, for
--                                    paging and pruning in name order
--       [3] docg:<collection> STRING the greatest version of a document
--                                    of the collection deleted or pruned: a
--                                    new document starts above it, so one
--                                    created again never meets a version of
--                                    its earlier life
-- ARGV: [1] name, [2] if-version ("0" creates, "-1" creates or replaces
--       whatever is stored, N replaces version N), [3] now (ns, decimal),
--       [4] body.
-- Returns {code, version, created}: code 0 stored (the new version and the
-- creation time kept), 1 stored version differs (the stored version, "0"
-- when there is none).
local name, ifv, now, body = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local old = redis.call('HGET', KEYS[1], name)
local have, created = '0', now
if old then
	local v, c = string.match(old, '^(%d+) (%-?%d+) ')
	if not v then
		-- Undecodable: only AnyVersion may overwrite it.
		v, c = '-', now
	end
	have, created = v, c
end
if ifv ~= '-1' and ifv ~= have then
	return {1, have, ''}
end
-- A document counts its own versions; a new one (or one whose stored
-- value cannot be read) starts above the collection's gone ones.
local ver = tonumber(have)
if not ver or ver == 0 then
	ver = tonumber(redis.call('GET', KEYS[3]) or '0')
end
ver = string.format('%d', ver + 1)
redis.call('HSET', KEYS[1], name, ver .. ' ' .. created .. ' ' .. now .. ' ' .. body)
redis.call('ZADD', KEYS[2], 0, name)
return {0, ver, created}
