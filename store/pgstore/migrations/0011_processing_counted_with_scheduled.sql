-- jobkit schema version 11: a claim moves no counter (issue 39).
--
-- Until version 10 a claim added two counter changes per group it took
-- from (Scheduled -1, Processing +1): rows of count_deltas on the hot
-- path of every job, and again in the compaction. Now the Scheduled
-- counter holds the Processing instances too, and Counts takes the
-- running rows (state 3, read through instances_running, as many as
-- attempts running) from it in the same snapshot, so the counts stay
-- exact. The Processing counters and changes of before are folded into
-- the Scheduled ones; what they count is kept.
INSERT INTO SCHEMA.counts AS c (ns, queue, kind, state, n)
	SELECT ns, queue, kind, 2, n FROM SCHEMA.counts WHERE state = 3
	ON CONFLICT (ns, queue, kind, state) DO UPDATE SET n = c.n + excluded.n;
DELETE FROM SCHEMA.counts WHERE state = 3;
UPDATE SCHEMA.count_deltas SET state = 2 WHERE state = 3;
