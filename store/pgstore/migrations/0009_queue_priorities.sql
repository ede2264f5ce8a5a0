-- jobkit schema version 9: each queue keeps the priorities its instances
-- were enqueued with (issue 17).
--
-- The claim reads the ready entries of one priority at a time,
-- priority = p AND run_at <= now, highest priority first, so a claim that
-- takes less than its limit no longer reads the entries scheduled for
-- later behind the ready ones (instances_ready orders by run_at only
-- within a priority). prios is sorted highest first and written only when
-- an enqueue (or a retry) brings a priority the queue has not had: the
-- queue row is read by every claim, written rarely. A priority stays in
-- the list when its instances are gone (one index probe per claim). A
-- queue that had more than 16 priorities has no list (NULL): its claims
-- read the index in claim order, as before.
ALTER TABLE SCHEMA.queues ADD COLUMN prios bigint[] DEFAULT '{}';
INSERT INTO SCHEMA.queues (ns, name) SELECT DISTINCT ns, queue FROM SCHEMA.instances ON CONFLICT DO NOTHING;
UPDATE SCHEMA.queues q SET prios = CASE WHEN cardinality(p.prios) > 16 THEN NULL ELSE p.prios END
	FROM (SELECT ns, queue, array_agg(DISTINCT priority ORDER BY priority DESC) AS prios FROM SCHEMA.instances GROUP BY ns, queue) AS p
	WHERE q.ns = p.ns AND q.name = p.queue;
