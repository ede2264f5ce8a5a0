-- jobkit schema version 6: label requirement expressions
-- (store.LabelRequirement). label_expr is set at enqueue when one of an
-- instance's requirements is an expression ("!key", "key=a|b",
-- "key!=v"): the claim checks those requirement by requirement, and
-- decides every other row with one array comparison, as before. Rows
-- enqueued before this version hold only the forms of before and keep
-- false; adding a column with a constant default rewrites nothing.

ALTER TABLE SCHEMA.instances ADD COLUMN label_expr boolean NOT NULL DEFAULT false;
