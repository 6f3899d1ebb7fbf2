DROP INDEX notification_audit_failures_idx ON notification_audit;

--bun:split

DROP INDEX notifications_delivered_idx ON notifications;

--bun:split

CREATE INDEX notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site)
    WHERE delivered_at IS NOT NULL;
