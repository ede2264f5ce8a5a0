-- jobkit schema version 5: sharded tasks (store.Instance.Parent,
-- ShardIndex, ShardCount). A shard names its parent; the partial index
-- finds the shards of a parent (Query.Parent) without reading any other
-- instance, and costs nothing for instances that are not shards.

ALTER TABLE SCHEMA.instances
	ADD COLUMN parent      text,
	ADD COLUMN shard_index integer NOT NULL DEFAULT 0,
	ADD COLUMN shard_count integer NOT NULL DEFAULT 0;

CREATE INDEX instances_parent ON SCHEMA.instances (ns, parent) WHERE parent IS NOT NULL;
