ALTER TABLE notification_audit DROP COLUMN IF EXISTS targets;

--bun:split

ALTER TABLE notifications DROP COLUMN IF EXISTS target_states;
