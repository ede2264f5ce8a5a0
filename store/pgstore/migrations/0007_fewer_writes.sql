-- jobkit schema version 7: fewer writes per job (issue 17).
--
-- history.created: the row also holds its instance's Created record, made
-- at the same time, by the same node, at attempt 0, just before the row's
-- own record. Enqueue writes its Created and Scheduled records as one such
-- row: one heap tuple and three index entries per job instead of two and
-- six. Records are numbered from their row's position: the row's own
-- record 2*pos+1, the Created record it holds 2*pos (record Seqs and event
-- cursors, "pg2-"; a "pg1-" cursor of before names position pos, record
-- 2*pos+1). Rows written before this version hold one record each and
-- keep false; adding a column with a constant default rewrites nothing.
ALTER TABLE SCHEMA.history ADD COLUMN created boolean NOT NULL DEFAULT false;

-- instances_owner is dropped: every claim wrote an entry into it (the state
-- change is never a HOT update), for lookups by owner that only the
-- rescue of a dead node's attempts and the node list make. Those read the
-- running instances through instances_lease (also limited to state 3),
-- which holds only what is running: as many rows as workers.
DROP INDEX SCHEMA.instances_owner;
