DROP INDEX IF EXISTS notification_audit_failures_idx;

--bun:split

ALTER TABLE notification_audit DROP COLUMN IF EXISTS type;

--bun:split

ALTER TABLE notification_audit DROP COLUMN IF EXISTS source_site;

--bun:split

DROP INDEX IF EXISTS notifications_delivered_idx;

--bun:split

CREATE INDEX IF NOT EXISTS notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site) WHERE delivered_at IS NOT NULL;
