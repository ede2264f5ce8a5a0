-- stream_range: page through the history or logs stream by record time.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] 'h' (history) or 'l' (logs), [3] since (us, 0 for
--       open), [4] until (us, 0 for open), [5] count, [6] cursor: '' to
--       start, else the last entry ID of the previous page.
-- Entry IDs are never before their record's time and at most the stream's
-- skew after it (see xadd_at), so [since, until) lies within the IDs
-- [since, until + skew). Returns {entries, cursor}: raw entry values in ID
-- order (the caller filters by exact time) and the ID to continue after
-- ('' when the range is exhausted). Read-only.
local which, since, until_, count, cursor = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local key, skewf = K_HIST, 'hskew'
if which == 'l' then
	key, skewf = K_LOGS, 'lskew'
end
local first = '-'
if cursor ~= '' then
	first = '(' .. cursor
elseif since > 0 then
	first = num(math.floor(since / 1000))
end
local last = '+'
if until_ > 0 then
	local skew = tonumber(redis.call('HGET', K_CTR, skewf) or '0')
	last = num(math.floor((until_ - 1) / 1000) + skew)
end
local es = redis.call('XRANGE', key, first, last, 'COUNT', count)
local out = {}
for _, e in ipairs(es) do
	out[#out + 1] = e[2][2]
end
local next = ''
if #es == count then
	next = es[#es][1]
end
return {out, next}
