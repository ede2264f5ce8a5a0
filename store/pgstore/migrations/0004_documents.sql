-- jobkit schema version 4: named JSON documents (store.Documents) in
-- collections, such as calendars and alert rules. Names compare in byte
-- order (COLLATE "C"), so the primary key serves the listing and pruning
-- in name order. The body is kept byte for byte (bytea, not jsonb, which
-- would reformat it). Versions come from one sequence, so a version is
-- never given twice, across deletes too.

CREATE SEQUENCE SCHEMA.document_version;

CREATE TABLE SCHEMA.documents (
	ns         text               NOT NULL,
	collection text COLLATE "C"   NOT NULL,
	name       text COLLATE "C"   NOT NULL,
	body       bytea              NOT NULL,
	version    bigint             NOT NULL,
	created_at bigint             NOT NULL,
	updated_at bigint             NOT NULL,
	PRIMARY KEY (ns, collection, name)
);
