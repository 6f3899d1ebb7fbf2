-- Delivery tracked target by target (MS SQL Server 2016 or later).
-- target_states holds the fate of each target of a notification: a JSON
-- array, in the order the targets were first attempted, of objects with the
-- keys t (target), s (status), n (attempts), e (last error), a (last
-- attempt) and d (delivered at); times in Unix microseconds (UTC), empty
-- fields left out. The targets of an Attempted audit record are a JSON
-- array too, of objects with the keys t (target), o (outcome) and e
-- (error). Both are nvarchar(max), as resolved_targets is, and NULL on rows
-- from before: such a notification's targets share its status, as one
-- group. Adding a nullable column is a change of metadata only.

ALTER TABLE notifications ADD target_states nvarchar(max) NULL;

--bun:split

ALTER TABLE notification_audit ADD targets nvarchar(max) NULL;
