-- renew: extend the leases of running attempts.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, [4] new deadline (us), then
--       per lease two values: instance ID, attempt.
-- Returns one code per lease: 0 renewed, 1 lost (not Processing, another
-- owner or attempt, missing or corrupt), 2 renewed and cancellation
-- requested. Writes no history; the renewed leases form one lease batch.
local now, owner, until_ = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local ids = argv_ids(5, 2)
local raws = hmget(K_ST, ids)
local out = {}
for j, id in ipairs(ids) do
	local attempt = tonumber(ARGV[5 + (j - 1) * 2 + 1])
	local t = raws[j] and (changed[id] or state(raws[j]))
	if t and t[T_STATE] == S_PROCESSING and t[T_OWNER] == owner and t[T_ATT] == attempt then
		t[T_UNTIL] = until_
		t[T_UPD] = now
		change(id, t)
		lease(id, until_)
		out[j] = (t[T_CANCEL] == 1) and 2 or 0
	else
		out[j] = 1
	end
end
commit(now, owner)
return out
