-- The throughput charts (MS SQL): delivered, failed and parked per time
-- bucket, per site or channel type.
--
-- Delivered rows are counted by delivered_at: the index the delivered KPI
-- reads now carries the type beside the site, so that a split by type reads
-- the index alone too.

DROP INDEX notifications_delivered_idx ON notifications;

--bun:split

CREATE INDEX notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site, type)
    WHERE delivered_at IS NOT NULL;

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time. Filtered: the records of successful attempts and deliveries, most
-- of the log, stay out.
CREATE INDEX notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (notification_id)
    WHERE status IN (N'Retrying', N'Parked');
