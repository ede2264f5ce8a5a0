-- jobkit schema version 10: no namespace-wide lock on any write (issue 39).
--
-- Until version 9 every write transaction ended by taking the namespace's
-- transaction-scoped advisory lock, to number history records in commit
-- order and to move the per-group counters; a caller's transaction that
-- scheduled a job (WithTx) and stayed open held it, and every other
-- enqueue, claim and finish of the namespace waited for its end.
--
-- The event feed's order. Each record now carries hx, the id of the
-- transaction that wrote it (pg_current_xact_id(), xid8), raised to the
-- instance's previous record's hx when that is higher (instances.hx, the
-- hx of an instance's newest record), and the feed reads records in
-- (hx, pos) order, delivering only those whose hx is below the xmin of
-- its snapshot: every transaction that could still write such a record
-- has ended, so none commits later behind the feed. One instance's
-- records keep their order: a later transition locks the row after the
-- earlier one committed, takes a greater pos, and an hx no lower. A
-- Processing record kept on its instance row (migration 0008) has its hx
-- in proc_hx, carried into the outcome's history row with it.
--
-- Rows written before this version have hx 0 (the constant default
-- rewrites nothing): they come first, in pos order, which was their
-- commit order, so a "pg1-"/"pg2-" cursor given out then names the point
-- (0, record) and follows on from where it was. New rows take the
-- writing transaction's id by default (COPY uses it too).
ALTER TABLE SCHEMA.history ADD COLUMN hx xid8 NOT NULL DEFAULT '0', ADD COLUMN proc_hx xid8;
ALTER TABLE SCHEMA.history ALTER COLUMN hx SET DEFAULT pg_current_xact_id();
ALTER TABLE SCHEMA.instances ADD COLUMN hx xid8 NOT NULL DEFAULT '0', ADD COLUMN proc_hx xid8;
ALTER TABLE SCHEMA.instances ALTER COLUMN hx SET DEFAULT pg_current_xact_id();

-- The feed's order is the history's key; pos alone stays unique (one
-- sequence), and per instance history_instance keeps pos order.
ALTER TABLE SCHEMA.history DROP CONSTRAINT history_pkey, ADD PRIMARY KEY (ns, hx, pos);
DROP INDEX SCHEMA.history_proc;
CREATE INDEX history_proc ON SCHEMA.history (ns, coalesce(proc_hx, '0'::xid8), proc_pos) WHERE proc_pos > 0;
DROP INDEX SCHEMA.instances_running;
CREATE INDEX instances_running ON SCHEMA.instances (ns, coalesce(proc_hx, '0'::xid8), proc_pos) WHERE state = 3;

-- The floor of the feed (the newest record pruned) is a point of that
-- order: (events_floor_hx, events_floor).
ALTER TABLE SCHEMA.meta ADD COLUMN events_floor_hx xid8 NOT NULL DEFAULT '0';

-- The per-group counters. A writer no longer updates a counts row (a row
-- lock an open transaction would hold against every writer of the group):
-- it inserts its changes here, and a compaction (a short transaction of
-- its own, run by the stores as they write) folds the committed ones into
-- counts. Counts and Lag read both, in one snapshot, so they stay exact.
CREATE TABLE SCHEMA.count_deltas (
	ns    text     NOT NULL,
	queue text     NOT NULL,
	kind  text     NOT NULL,
	state smallint NOT NULL,
	n     bigint   NOT NULL
);
