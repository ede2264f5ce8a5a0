-- admin_retry: move final instances back to Scheduled (store.Admin.Retry).
-- KEYS: the namespace keys (lib.lua). The per-queue keys it builds
--       (q:<queue>:r:<member>, q:<queue>:s, q:<queue>:p, q:<queue>:h)
--       carry the namespace's hash tag, as lib.lua explains, so they are
--       in KEYS[1]'s slot.
-- ARGV: [1] prefix, [2] now (us), [3] node, [4] RunAt (us), [5] "1" to
--       reset the attempt count to 0 (else it is kept), [6] the history
--       record's error ("retried by <node>"), then the instance IDs.
-- Each final instance gets State Scheduled at RunAt, its finish time,
-- result, error, lease and cancel flag cleared, and a history record (one
-- entry for the call); it goes into its queue (a ready list when RunAt <=
-- now, else the scheduled set) and the queue's channel gets a PUBLISH.
-- Its done-list member stays behind: prune skips a member whose instance
-- is no longer in that state with that FinishedAt. A Canceled instance may
-- still have a member in its lane's ready list (Cancel leaves it for a
-- claim to drop); it is removed (LREM, O(length of that list)), so it
-- cannot claim the instance before its new RunAt. Unique keys are not
-- touched. Each retry moves one from its final state's count (cnt) to
-- Scheduled's.
-- Returns two values per ID: code (0 retried, 1 no such instance, 2 not in
-- a final state, 3 the record cannot be decoded) and the State number the
-- instance was in (0 when unknown). An ID given twice is answered 2 the
-- second time.
local now, node, runat = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local reset, msg = ARGV[5] == '1', ARGV[6]

local out = {}
for i = 7, #ARGV do
	local id = ARGV[i]
	local code, was = 0, 0
	local craw = redis.call('HGET', K_INST, id)
	local p = craw and spec(craw)
	local t
	if not craw then
		code = 1
	elseif not p then
		code = 3
	else
		t = changed[id]
		if not t then
			local raw = redis.call('HGET', K_ST, id)
			if raw then
				t = state(raw)
			else
				t = fresh(p[P_RUNAT]) -- waiting for its first attempt
			end
		end
		if not t then
			code = 3
		else
			was = t[T_STATE]
			if was < S_COMPLETED then
				code = 2
			end
		end
	end
	if code == 0 then
		local lane = lane_of(p[P_KIND], p[P_LABELS])
		if was == S_CANCELED then
			-- Its member, if a cancel left one: pushed with its RunAt then
			-- (the state's, or the spec's when it never ran), or in the
			-- form ready lists had before lanes.
			local runat0 = t[T_RUNAT]
			if runat0 == 0 then
				runat0 = p[P_RUNAT]
			end
			local m = be(runat0, 7) .. be(p[P_SEQ], 6) .. id
			redis.call('LREM', ready_key(p[P_QUEUE], level_member(p[P_PRIO], lane)), 0, m)
			redis.call('ZREM', ready_key(p[P_QUEUE], set_member(p[P_PRIO], lane)), m)
			redis.call('LREM', ready_key(p[P_QUEUE], num(p[P_PRIO])), 0, be(p[P_SEQ], 6) .. id)
		end
		t[T_STATE] = S_SCHEDULED
		if reset then
			t[T_ATT] = 0
		end
		t[T_RUNAT] = runat
		t[T_OWNER], t[T_UNTIL], t[T_CANCEL] = '', 0, 0
		t[T_UPD], t[T_FIN] = now, 0
		t[T_RES], t[T_ERR] = '', ''
		count_move(id, craw, was, S_SCHEDULED)
		change(id, t, S_SCHEDULED, msg, '')
		place(id, p[P_QUEUE], p[P_PRIO], p[P_SEQ], runat, now, false, lane)
	end
	out[#out + 1] = code
	out[#out + 1] = was
end
commit(now, node)
return out
