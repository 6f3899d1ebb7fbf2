ALTER TABLE notification_audit DROP COLUMN targets;

--bun:split

ALTER TABLE notifications DROP COLUMN target_states;
