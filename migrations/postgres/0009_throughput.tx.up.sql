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

-- Failed attempts and parkings are counted from the audit log, whose
-- records now carry their notification's site and type (the dispatcher
-- copies them), so that a split reads no row. A default on a new column
-- rewrites no row; the records that count are filled from their rows.
ALTER TABLE notification_audit ADD COLUMN IF NOT EXISTS source_site text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

ALTER TABLE notification_audit ADD COLUMN IF NOT EXISTS type text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

UPDATE notification_audit AS a SET source_site = n.source_site, type = n.type
    FROM notifications AS n
    WHERE n.id = a.notification_id AND a.status IN ('Retrying', 'Parked');

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time, with their site and type. Partial: the records of successful
-- attempts and deliveries, most of the log, stay out.
CREATE INDEX IF NOT EXISTS notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (source_site, type)
    WHERE status IN ('Retrying', 'Parked');
