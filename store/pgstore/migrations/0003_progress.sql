-- jobkit schema version 2: the progress running attempts report
-- (store.Progress), one row per instance, beside the instances so the
-- claim and the lookups never read it. It goes with its instance.

CREATE TABLE SCHEMA.progress (
	ns       text             NOT NULL,
	id       text             NOT NULL,
	attempt  integer          NOT NULL,
	fraction double precision NOT NULL,
	message  text             NOT NULL DEFAULT '',
	at       bigint           NOT NULL,
	PRIMARY KEY (ns, id),
	FOREIGN KEY (ns, id) REFERENCES SCHEMA.instances (ns, id) ON DELETE CASCADE
);
