-- Not transactional, like the up migration: the index swap is CONCURRENTLY,
-- and every statement is safe to repeat.

DROP INDEX CONCURRENTLY IF EXISTS notification_audit_failures_idx;

--bun:split

ALTER TABLE notification_audit DROP COLUMN IF EXISTS type;

--bun:split

ALTER TABLE notification_audit DROP COLUMN IF EXISTS source_site;

--bun:split

DROP INDEX CONCURRENTLY IF EXISTS notifications_delivered_0009_idx;

--bun:split

CREATE INDEX CONCURRENTLY notifications_delivered_0009_idx
    ON notifications (delivered_at) INCLUDE (source_site) WHERE delivered_at IS NOT NULL;

--bun:split

DROP INDEX CONCURRENTLY IF EXISTS notifications_delivered_idx;

--bun:split

ALTER INDEX notifications_delivered_0009_idx RENAME TO notifications_delivered_idx;
