-- jobkit schema version 2: the instances table is vacuumed after 20,000
-- dead rows whatever its size (PostgreSQL's default waits for a fifth of
-- the table: 200,000 at a million rows), with its indexes every time (the
-- default may skip them when few heap pages have dead rows, which is the
-- case here: claims kill rows in queue order, so they sit together).
-- A claim kills the Scheduled version of each row it takes, whose entry
-- stays at the head of instances_ready until a VACUUM removes it; every
-- later claim walks past those entries, so without this the claim cost
-- grows with the queue's depth.
ALTER TABLE SCHEMA.instances SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000, vacuum_index_cleanup = on);
