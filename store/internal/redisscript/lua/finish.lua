-- finish: apply the outcomes of running attempts.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, then per outcome seven values:
--       instance ID, attempt, new state, RunAt (us, for Scheduled),
--       release (1 hands the attempt back uncounted), result, error.
-- Returns one code per outcome: 0 applied, 1 lease lost (not Processing,
-- another owner or attempt, or missing), 2 the record is corrupt.
-- An applied outcome appends one history record; a Scheduled one puts the
-- instance back in its queue and PUBLISHes on the queue's channel.
local now, owner = tonumber(ARGV[2]), ARGV[3]

local function one(id, attempt, state, run_at, release, result, err)
	local r, why = load(id)
	if not r then
		return why == 'corrupt' and 2 or 1
	end
	if r[F_STATE] ~= S_PROCESSING or r[F_LOWNER] ~= owner or r[F_ATTEMPT] ~= attempt then
		return 1
	end
	clear_lease(id, r)
	r[F_ERROR] = err
	r[F_UPDATED] = now
	if state == S_SCHEDULED then
		hadd(id, r, {S_SCHEDULED}, attempt, now, owner, err, '')
		if release then
			r[F_ATTEMPT] = r[F_ATTEMPT] - 1
		end
		r[F_STATE] = S_SCHEDULED
		r[F_RUNAT] = run_at
		save(id, r)
		place(id, r, now)
	else
		if state == S_COMPLETED then
			r[F_RESULT] = result
		end
		hadd(id, r, {state}, attempt, now, owner, err, result)
		finalize(id, r, state, now)
		save(id, r)
	end
	return 0
end

local out = {}
for i = 4, #ARGV, 7 do
	out[#out + 1] = one(ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
		tonumber(ARGV[i + 3]), ARGV[i + 4] == '1', ARGV[i + 5], ARGV[i + 6])
end
flush_sets()
return out
