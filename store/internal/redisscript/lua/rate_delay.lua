-- rate_delay: push a rate limit's next start back (store.RateLimitDelayer).
-- Self-contained (not prefixed by lib.lua).
-- KEYS: [1] rl (HASH kind \0 queue -> TAT, us of the server's TIME; see
--       claim.lua).
-- ARGV: [1] the limit's field (kind \0 queue), [2] its tolerance (us),
--       [3] the delay (us).
-- Sets the TAT to at least the server's time now + delay + tolerance, so
-- the limit lets nothing start before the delay ends. Returns the TAT.
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local want = now + tonumber(ARGV[3]) + tonumber(ARGV[2])
local tat = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if want > tat then
	tat = want
	redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', tat))
end
return string.format('%.0f', tat)
