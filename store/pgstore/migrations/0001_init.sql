-- jobkit schema version 1: the instances, their history and logs, the
-- per-group counters, queues, claims, nodes, definitions and triggers.
-- SCHEMA is replaced by the quoted schema name. Every table has an ns
-- column: namespaces share the tables of one schema and never see each
-- other's rows. Times are Unix nanoseconds (bigint): exact, and 0 is the
-- zero time.

CREATE SEQUENCE SCHEMA.seq;

CREATE TABLE SCHEMA.instances (
	ns           text     NOT NULL,
	id           text     NOT NULL,
	seq          bigint   NOT NULL DEFAULT nextval('SCHEMA.seq'),
	kind         text     NOT NULL,
	queue        text     NOT NULL,
	args         bytea,
	priority     bigint   NOT NULL DEFAULT 0,
	run_at       bigint   NOT NULL,
	state        smallint NOT NULL,
	attempt      integer  NOT NULL DEFAULT 0,
	max_retries  integer  NOT NULL DEFAULT 0,
	timeout      bigint   NOT NULL DEFAULT 0,
	unique_key   text,
	unique_until bigint   NOT NULL DEFAULT 0,
	lease_owner  text,
	lease_until  bigint   NOT NULL DEFAULT 0,
	cancel_req   boolean  NOT NULL DEFAULT false,
	created_at   bigint   NOT NULL,
	updated_at   bigint   NOT NULL,
	finished_at  bigint   NOT NULL DEFAULT 0,
	result       bytea,
	error        text     NOT NULL DEFAULT '',
	labels       text[],
	-- store.Instance.Metadata as JSON; json, not jsonb, which refuses a
	-- \u0000 the contract allows in values.
	metadata     json,
	PRIMARY KEY (ns, id)
) WITH (fillfactor = 80);

-- The claim order: what is ready, highest priority first, then readiness.
-- The only index of Scheduled instances, so no plan of the claim (a
-- generic one, made while the table looked empty) can take another and
-- sort the whole queue: NextRunAt and Lag read it one priority at a time.
CREATE INDEX instances_ready ON SCHEMA.instances (ns, queue, priority DESC, run_at, seq) WHERE state = 2;
-- Rescue of expired leases, and of dead nodes' attempts.
CREATE INDEX instances_lease ON SCHEMA.instances (ns, lease_until) WHERE state = 3;
CREATE INDEX instances_owner ON SCHEMA.instances (ns, lease_owner) WHERE state = 3;
-- Retention of finished instances.
CREATE INDEX instances_finished ON SCHEMA.instances (ns, finished_at) WHERE state >= 4;
-- Lookups, newest first.
CREATE INDEX instances_created ON SCHEMA.instances (ns, created_at DESC, seq DESC);

-- Unique keys: the key is the primary key, so the database enforces it;
-- a holder whose UniqueUntil passed is replaced in one upsert.
CREATE TABLE SCHEMA.unique_keys (
	ns    text   NOT NULL,
	key   text   NOT NULL,
	id    text   NOT NULL,
	until bigint NOT NULL,
	PRIMARY KEY (ns, key)
);

-- History: pos is taken under the namespace's transaction lock, so pos
-- order is commit order (the event feed follows it).
CREATE TABLE SCHEMA.history (
	pos         bigint   NOT NULL DEFAULT nextval('SCHEMA.seq'),
	ns          text     NOT NULL,
	instance_id text     NOT NULL,
	kind        text     NOT NULL,
	queue       text     NOT NULL,
	state       smallint NOT NULL,
	attempt     integer  NOT NULL,
	t           bigint   NOT NULL,
	node        text     NOT NULL DEFAULT '',
	error       text     NOT NULL DEFAULT '',
	result      bytea,
	PRIMARY KEY (ns, pos) -- the event feed's order
);
CREATE INDEX history_instance ON SCHEMA.history (ns, instance_id, pos);
CREATE INDEX history_time ON SCHEMA.history (ns, t, pos);

CREATE TABLE SCHEMA.logs (
	pos         bigint   NOT NULL DEFAULT nextval('SCHEMA.seq'),
	ns          text     NOT NULL,
	instance_id text     NOT NULL,
	kind        text     NOT NULL,
	attempt     integer  NOT NULL,
	level       smallint NOT NULL,
	t           bigint   NOT NULL,
	node        text     NOT NULL DEFAULT '',
	message     text     NOT NULL,
	PRIMARY KEY (ns, pos)
);
CREATE INDEX logs_instance ON SCHEMA.logs (ns, instance_id, pos);
CREATE INDEX logs_time ON SCHEMA.logs (ns, t, pos);

-- Counters per queue, kind and state, changed in the transaction of each
-- transition under the namespace's lock.
CREATE TABLE SCHEMA.counts (
	ns    text     NOT NULL,
	queue text     NOT NULL,
	kind  text     NOT NULL,
	state smallint NOT NULL,
	n     bigint   NOT NULL,
	PRIMARY KEY (ns, queue, kind, state)
);

CREATE TABLE SCHEMA.queues (
	ns     text    NOT NULL,
	name   text    NOT NULL,
	paused boolean NOT NULL DEFAULT false,
	PRIMARY KEY (ns, name)
);

-- The last claim with a ClaimSeq of each owner (see store.ClaimParams).
CREATE TABLE SCHEMA.claims (
	ns       text      NOT NULL,
	owner    text      NOT NULL,
	seq      bigint    NOT NULL,
	until    bigint    NOT NULL,
	ids      text[]    NOT NULL,
	attempts integer[] NOT NULL,
	PRIMARY KEY (ns, owner)
);

-- Per namespace: the event feed's floor (the newest pos pruned) and the
-- trigger version counter.
CREATE TABLE SCHEMA.meta (
	ns              text   NOT NULL PRIMARY KEY,
	events_floor    bigint NOT NULL DEFAULT 0,
	trigger_version bigint NOT NULL DEFAULT 0
);

-- The node registry; store_seen and gone_at are the database's clock.
CREATE TABLE SCHEMA.nodes (
	ns         text     NOT NULL,
	id         text     NOT NULL,
	info       jsonb    NOT NULL,
	status     smallint NOT NULL,
	last_seen  bigint   NOT NULL,
	store_seen bigint   NOT NULL,
	gone_at    bigint   NOT NULL DEFAULT 0,
	PRIMARY KEY (ns, id)
);

CREATE TABLE SCHEMA.definitions (
	ns         text   NOT NULL,
	kind       text   NOT NULL,
	body       jsonb  NOT NULL,
	version    bigint NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	PRIMARY KEY (ns, kind)
);

CREATE TABLE SCHEMA.triggers (
	ns         text   NOT NULL,
	name       text   NOT NULL,
	body       jsonb  NOT NULL,
	version    bigint NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	PRIMARY KEY (ns, name)
);
