-- renew: extend the leases of running attempts.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, [4] new deadline (us), then
--       per lease two values: instance ID, attempt.
-- Returns one code per lease: 0 renewed, 1 lost (not Processing, another
-- owner or attempt, missing or corrupt), 2 renewed and cancellation
-- requested.
local now, owner, until_ = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local out, leases = {}, {}
for i = 5, #ARGV, 2 do
	local id, attempt = ARGV[i], tonumber(ARGV[i + 1])
	local r = load(id)
	if r and r[F_STATE] == S_PROCESSING and r[F_LOWNER] == owner and r[F_ATTEMPT] == attempt then
		r[F_LUNTIL] = until_
		r[F_UPDATED] = now
		save(id, r)
		leases[#leases + 1] = until_
		leases[#leases + 1] = id
		out[#out + 1] = (r[F_CANCEL] == 1) and 2 or 0
	else
		out[#out + 1] = 1
	end
end
chunked('ZADD', K_LEASE, leases)
return out
