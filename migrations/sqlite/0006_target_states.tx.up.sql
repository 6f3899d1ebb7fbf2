-- Delivery tracked target by target (SQLite). target_states holds the fate
-- of each target of a notification, a JSON array in the order the targets
-- were first attempted: [{"t": target, "s": status, "n": attempts,
-- "e": last error, "a": last attempt, "d": delivered at}], times in Unix
-- microseconds (UTC), empty fields left out. The targets of an Attempted
-- audit record are a JSON array too: [{"t": target, "o": outcome,
-- "e": error}]. Both are NULL on rows from before: such a notification's
-- targets share its status, as one group.

ALTER TABLE notifications ADD COLUMN target_states TEXT;

--bun:split

ALTER TABLE notification_audit ADD COLUMN targets TEXT;
