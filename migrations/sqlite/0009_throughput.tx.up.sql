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

-- Failed attempts and parkings are counted from the audit log, whose
-- records now carry their notification's site and type (the core copies
-- them onto every record it writes), so that a split reads no row. The records that count are
-- filled from their rows.
ALTER TABLE notification_audit ADD COLUMN source_site TEXT NOT NULL DEFAULT '';

--bun:split

ALTER TABLE notification_audit ADD COLUMN type TEXT NOT NULL DEFAULT '';

--bun:split

UPDATE notification_audit SET
    source_site = (SELECT n.source_site FROM notifications AS n WHERE n.id = notification_audit.notification_id),
    type = (SELECT n.type FROM notifications AS n WHERE n.id = notification_audit.notification_id)
    WHERE status IN ('Retrying', 'Parked')
      AND EXISTS (SELECT 1 FROM notifications AS n WHERE n.id = notification_audit.notification_id);

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time, with their site and type. Partial: the records of successful
-- attempts and deliveries, most of the log, stay out, and so do those of
-- attempts a shutdown cut short (Interrupted), which are no failures.
CREATE INDEX IF NOT EXISTS notification_audit_failures_idx
    ON notification_audit (kind, status, at, source_site, type)
    WHERE status IN ('Retrying', 'Parked') AND outcome <> 'Interrupted';
