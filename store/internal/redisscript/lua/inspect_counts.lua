-- inspect_counts: the counters of a namespace, read in one step.
-- KEYS: the namespace keys (lib.lua); the cnt hash is built from the
-- prefix, safe under the namespace's hash tag like every script's keys.
-- ARGV: [1] prefix.
-- Returns the cnt hash (see count_move in lib.lua) as a flat list field1,
-- count1, field2, ...: one atomic read, so the counts are those of one
-- moment. Read-only.
return redis.call('HGETALL', K_CNT)
