-- jobkit schema version 12: an enqueue's records in one row per
-- statement (issue 39).
--
-- Until version 11 every instance an enqueue stored had a history row of
-- its own for its Created and Scheduled records (migration 0007): a heap
-- tuple and three index entries per job (the feed's order, the instance,
-- the time). Now each enqueue statement (or COPY batch) writes one row
-- here holding the records of every instance it stored, in Seq order:
-- instance i's Created record is number 2*seqs[i] and its Scheduled record
-- 2*seqs[i]+1 (the instance's own Seq, from the sequence history
-- positions come from), both at (hx, t, node) of the row. The three index
-- entries are paid once per statement, not per job; the instance row
-- names its enqueue's row (enq_last, the row's key), so its history is
-- found from it.
--
-- Why not the instance row itself: a record needs an index entry in each
-- order it is read in (the event feed by (hx, record), the history
-- lookups by time), and every claim and finish writes a new version of
-- the instance row (the state is in the partial indexes' predicates, so
-- no update is HOT), which would write those entries again: three times
-- per job instead of once per batch.
--
-- last is the greatest Seq the statement took (its instances' Seqs are
-- all at most last; the statements of one transaction never interleave),
-- so the rows in (hx, last) order hold the records in the feed's order.
-- ids[i] is NULL once instance i was removed (deleted or pruned with its
-- instance); cut counts the records retention removed from the front
-- (record 2i is pair i's Created, 2i+1 its Scheduled). Instances stored
-- before this version keep their history rows and a NULL enq_last.
CREATE TABLE SCHEMA.enqueued (
	ns     text     NOT NULL,
	hx     xid8     NOT NULL DEFAULT pg_current_xact_id(),
	last   bigint   NOT NULL,
	t      bigint   NOT NULL,
	node   text     NOT NULL DEFAULT '',
	seqs   bigint[] NOT NULL,
	ids    text[]   NOT NULL,
	kinds  text[]   NOT NULL,
	queues text[]   NOT NULL,
	cut    integer  NOT NULL DEFAULT 0,
	PRIMARY KEY (ns, hx, last) -- the event feed's order
);
CREATE UNIQUE INDEX enqueued_last ON SCHEMA.enqueued (ns, last);
CREATE INDEX enqueued_time ON SCHEMA.enqueued (ns, t, last);

ALTER TABLE SCHEMA.instances ADD COLUMN enq_last bigint;
