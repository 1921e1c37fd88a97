-- Integrity (issue 7, finding 3).

-- An Idempotency-Key is scoped to caller, route (the operation kind) and target (the instance, and
-- the member a member route names): the same key on another member is another request.
ALTER TABLE operations ADD COLUMN target_member_id uuid REFERENCES app_instance_members(id);
UPDATE operations SET target_member_id = member_ids[1]
 WHERE kind IN ('member_drain', 'member_resume', 'member_remove', 'member_replace');
DROP INDEX operations_idempotency;
CREATE UNIQUE INDEX operations_idempotency
    ON operations (instance_id, requested_by, kind, target_member_id, idempotency_key) NULLS NOT DISTINCT
    WHERE idempotency_key IS NOT NULL;

