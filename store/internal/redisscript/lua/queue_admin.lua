-- queue_admin: pause or resume a queue.
-- KEYS: the namespace keys (lib.lua).
-- ARGV: [1] prefix, [2] queue, [3] '1' to pause, '0' to resume.
-- Pausing adds the queue to the queues set (so a queue never used is
-- created paused) and to the paused set, PREFIX .. 'paused', which claim
-- reads in the same way: a key built from the prefix, so under the
-- namespace's hash tag, in the slot of KEYS[1]. Resuming removes it from
-- the paused set and, when it was paused, publishes on the queue's wake-up
-- channel so claimers come back at once.
-- Returns 1 when the flag changed, else 0.
local queue, pause = ARGV[2], ARGV[3] == '1'
local pkey = PREFIX .. 'paused'
if pause then
	redis.call('SADD', K_QUEUES, queue)
	return redis.call('SADD', pkey, queue)
end
local n = redis.call('SREM', pkey, queue)
if n == 1 then
	wake(queue)
end
return n
