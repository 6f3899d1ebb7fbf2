-- Ordered as the up migration: the old index is built beside the new one
-- first, the schema lock on notifications taken last.

CREATE INDEX notifications_delivered_0009_idx
    ON notifications (delivered_at) INCLUDE (source_site)
    WHERE delivered_at IS NOT NULL;

--bun:split

DROP INDEX notification_audit_failures_idx ON notification_audit;

--bun:split

ALTER TABLE notification_audit DROP CONSTRAINT notification_audit_type_default, notification_audit_source_site_default;

--bun:split

ALTER TABLE notification_audit DROP COLUMN type, source_site;

--bun:split

DROP INDEX notifications_delivered_idx ON notifications;

--bun:split

EXEC sp_rename N'notifications.notifications_delivered_0009_idx', N'notifications_delivered_idx', N'INDEX';
