-- jobkit schema version 14: workflow tasks (store.Instance.Task). The
-- task's place in its workflow (workflow ID, name, dependencies'
-- and dependents' IDs, failure policy) is kept as the JSON that
-- store.MarshalTask writes; NULL for an instance that is not a workflow
-- task. Nothing queries it: a workflow's tasks are found by their IDs
-- (store.WorkflowTaskID), so it needs no index.

ALTER TABLE SCHEMA.instances ADD COLUMN task text;
