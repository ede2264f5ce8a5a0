-- jobkit schema version 13: an attempt that ends an instance leaves its
-- records on the instance row (issue 39).
--
-- Until version 12 every finish wrote a history row per attempt (its
-- outcome, holding the Processing record the claim left on the instance
-- row, migration 0008): a heap tuple and five index entries. Now a finish
-- that ends the instance (Completed, Terminated, Canceled, TimedOut)
-- writes no history row: the outcome stays on the row, which has it all
-- already (state, attempt, finished_at as its time, error, result) but
-- its position, fin_pos, and its node, fin_node; its place in the feed's
-- order is (hx, fin_pos), hx being the finish's (no later write changes a
-- finished row but Admin.Retry, which writes both records into a history
-- row first, at their places). The attempt's Processing record stays
-- where the claim put it (proc_pos, proc_t, proc_hx), its node fin_node.
-- The row is read through three partial indexes of the finished rows
-- that hold their records (fin_pos > 0): the outcome in the feed's order
-- (the time order is instances_finished's), the Processing record in the
-- feed's order and in time order. They are entries of the finish's own
-- new row version: three, against the history row's tuple and five.
--
-- A retry (the attempt back to Scheduled), and every change written by a
-- transaction of several statements (rescue, cancel, Admin, a finish
-- whose fast statement did not apply), still writes a history row: the
-- next attempt's claim takes the instance row's Processing record's
-- place. Rows finished before this version have a NULL fin_pos and their
-- history rows, as before.
ALTER TABLE SCHEMA.instances ADD COLUMN fin_pos bigint, ADD COLUMN fin_node text;

CREATE INDEX instances_final ON SCHEMA.instances (ns, hx, fin_pos) WHERE state >= 4 AND fin_pos > 0;
CREATE INDEX instances_final_proc ON SCHEMA.instances (ns, coalesce(proc_hx, '0'::xid8), proc_pos) WHERE state >= 4 AND fin_pos > 0 AND proc_pos > 0;
CREATE INDEX instances_final_proc_time ON SCHEMA.instances (ns, proc_t, proc_pos) WHERE state >= 4 AND fin_pos > 0 AND proc_pos > 0;
