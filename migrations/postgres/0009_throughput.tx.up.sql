-- The throughput charts (PostgreSQL): delivered, failed and parked per time
-- bucket, per site or channel type.
--
-- Delivered rows are counted by delivered_at: the index the delivered KPI
-- reads now carries the type beside the site, so that a split by type reads
-- the index alone too. (Rebuilt in the migration's transaction: writes to
-- notifications wait for the build, about a second per million rows.)

DROP INDEX IF EXISTS notifications_delivered_idx;

--bun:split

CREATE INDEX IF NOT EXISTS notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site, type) WHERE delivered_at IS NOT NULL;

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time. Partial: the records of successful attempts and deliveries, most of
-- the log, stay out.
CREATE INDEX IF NOT EXISTS notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (notification_id)
    WHERE status IN ('Retrying', 'Parked');
