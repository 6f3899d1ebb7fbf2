DROP INDEX notification_audit_failures_idx ON notification_audit;

--bun:split

ALTER TABLE notification_audit DROP CONSTRAINT notification_audit_type_default, notification_audit_source_site_default;

--bun:split

ALTER TABLE notification_audit DROP COLUMN type, source_site;

--bun:split

DROP INDEX notifications_delivered_idx ON notifications;

--bun:split

CREATE INDEX notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site)
    WHERE delivered_at IS NOT NULL;
