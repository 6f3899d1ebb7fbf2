-- The throughput charts (SQLite): delivered, failed and parked per time
-- bucket, per site or channel type.
--
-- Delivered rows are counted by delivered_at: the index the delivered KPI
-- reads (by name) now carries the type after the site, so that a split by
-- type reads the index alone too.

DROP INDEX IF EXISTS notifications_delivered_idx;

--bun:split

CREATE INDEX IF NOT EXISTS notifications_delivered_idx
    ON notifications (delivered_at, source_site, type) WHERE delivered_at IS NOT NULL;

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time. Partial: the records of successful attempts and deliveries, most of
-- the log, stay out.
CREATE INDEX IF NOT EXISTS notification_audit_failures_idx
    ON notification_audit (kind, status, at, notification_id)
    WHERE status IN ('Retrying', 'Parked');
