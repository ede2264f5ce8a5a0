-- finish: apply the outcomes of running attempts.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] now (us), [3] owner, then per outcome seven values:
--       instance ID, attempt, new state, RunAt (us, for Scheduled),
--       release (1 hands the attempt back uncounted), result, error.
-- Returns one code per outcome: 0 applied, 1 lease lost (not Processing,
-- another owner or attempt, or missing), 2 the record is corrupt, 3
-- applied as Canceled: a Scheduled outcome (a retry or release) of an
-- instance whose cancel flag is set ends it Canceled instead, the attempt
-- counted, with the outcome's error, so a cancel requested while the
-- attempt ran is never followed by another attempt. An outcome found
-- applied already (a Finish repeated after a lost reply: the state is the
-- outcome's, or Canceled as above, and the instance's last history entry
-- was written by owner) is 0 or 3 and changes nothing.
-- Applied outcomes share one history entry (a record each). A Scheduled
-- one goes back to its queue (a released attempt to the front of its
-- ready list, keeping its place) and PUBLISHes on the queue's channel.
local now, owner = tonumber(ARGV[2]), ARGV[3]
local N = 7

local ids = argv_ids(4, N)
local raws = hmget(K_ST, ids)

-- applied tells whether t is where this very outcome left it: the same
-- state (or Canceled for a Scheduled one), attempt, error, result
-- (Completed) and RunAt (Scheduled), and the instance's last history
-- entry (the one that outcome would have written) names owner as its
-- node. The entry is read only on this path.
local function applied(t, attempt, st, run_at, release, result, err)
	if st == S_SCHEDULED and t[T_STATE] == S_CANCELED then
		st = S_CANCELED
	end
	if t[T_STATE] ~= st or t[T_ERR] ~= err then
		return false
	end
	if st == S_SCHEDULED then
		local want = attempt
		if release then
			want = attempt - 1
		end
		if t[T_ATT] ~= want or t[T_RUNAT] ~= run_at then
			return false
		end
	elseif t[T_ATT] ~= attempt or (st == S_COMPLETED and t[T_RES] ~= result) then
		return false
	end
	local last = string.match(t[T_REFS], '(%S+)%s*$')
	if not last then
		return false
	end
	local es = redis.call('XRANGE', K_HIST, last, last)
	if #es == 0 then
		return false
	end
	local ok, _, kind, _, node = pcall(cmsgpack.unpack_limit, es[1][2][2], 3)
	return ok and kind == 't' and node == owner
end

local function one(j, id, attempt, st, run_at, release, result, err)
	if not raws[j] then
		return 1
	end
	local t = changed[id] or state(raws[j])
	if not t then
		return 2
	end
	if t[T_STATE] ~= S_PROCESSING or t[T_OWNER] ~= owner or t[T_ATT] ~= attempt then
		if applied(t, attempt, st, run_at, release, result, err) then
			if t[T_STATE] == S_CANCELED and st == S_SCHEDULED then
				return 3
			end
			return 0
		end
		return 1
	end
	local code = 0
	if st == S_SCHEDULED and t[T_CANCEL] ~= 0 then
		-- Canceled while the attempt ran, before a renewal told its
		-- owner: the cancel wins over another attempt.
		st, release, code = S_CANCELED, false, 3
	end
	local p
	if st == S_SCHEDULED then
		p = spec(redis.call('HGET', K_INST, id))
		if not p then
			return 2
		end
	end
	clear_lease(id, t)
	count_move(id, nil, S_PROCESSING, st)
	t[T_ERR] = err
	t[T_UPD] = now
	if st == S_SCHEDULED then
		change(id, t, S_SCHEDULED, err, '')
		if release then
			t[T_ATT] = t[T_ATT] - 1
		end
		t[T_STATE] = S_SCHEDULED
		t[T_RUNAT] = run_at
		place(id, p[P_QUEUE], p[P_PRIO], p[P_SEQ], run_at, now, release, lane_of(p[P_KIND], p[P_LABELS]))
	else
		if st == S_COMPLETED then
			t[T_RES] = result
		end
		change(id, t, st, err, result)
		finalize(id, t, st, now)
	end
	return code
end

local out = {}
for j = 1, #ids do
	local i = 4 + (j - 1) * N
	out[j] = one(j, ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
		tonumber(ARGV[i + 3]), ARGV[i + 4] == '1', ARGV[i + 5], ARGV[i + 6])
end
commit(now, owner)
return out
