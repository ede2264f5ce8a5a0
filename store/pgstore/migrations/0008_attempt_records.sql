-- jobkit schema version 8: one history row per attempt (issue 17).
--
-- A claim no longer writes a history row for its Processing record. The
-- record stays on the instance row while the attempt runs: proc_pos, its
-- position (taken under the namespace's lock, like every history
-- position), and proc_t, its time; its node is the lease owner, its
-- attempt the row's. Whatever ends the attempt (finish, rescue) writes the
-- record into the outcome's history row (proc_pos, proc_t, and proc_node
-- when the outcome's node differs), so an attempt costs one history row,
-- not two. The record keeps its number, 2*proc_pos+1, wherever it is.
-- The columns are NULL where there is no record (no bytes in the row):
-- instances not claimed since this version, history rows of other
-- records, and attempts claimed before it (whose Processing records are
-- history rows of their own, also for attempts running now).
ALTER TABLE SCHEMA.instances ADD COLUMN proc_pos bigint, ADD COLUMN proc_t bigint;
ALTER TABLE SCHEMA.history ADD COLUMN proc_pos bigint, ADD COLUMN proc_t bigint, ADD COLUMN proc_node text;

-- The event feed reads the Processing records in position order, and the
-- history lookups by time, wherever they are: on running instances
-- (instances_running, which replaces instances_lease: the rescue of
-- expired leases and of dead nodes' attempts reads every running row, as
-- many as there are attempts running) and in finished rows.
CREATE INDEX instances_running ON SCHEMA.instances (ns, proc_pos) WHERE state = 3;
DROP INDEX SCHEMA.instances_lease;
CREATE INDEX history_proc ON SCHEMA.history (ns, proc_pos) WHERE proc_pos > 0;
CREATE INDEX history_proc_time ON SCHEMA.history (ns, proc_t, proc_pos) WHERE proc_pos > 0;
