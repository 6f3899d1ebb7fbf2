-- The throughput charts (PostgreSQL): delivered, failed and parked per time
-- bucket, per site or channel type.
--
-- Not transactional (no ".tx" in the file name): each statement commits on
-- its own, so that no lock is held across the index builds and the
-- backfill. Reads and writes of notifications and of its audit log go on
-- throughout; the ALTER TABLEs take their table's exclusive lock for a
-- moment (a default on a new column rewrites no row), and the index swap
-- is CONCURRENTLY. Stopped half way, the migration is not recorded and
-- runs again from the top: every statement is safe to repeat (IF EXISTS,
-- IF NOT EXISTS, a dropped half-built index, a backfill that writes only
-- what differs).

-- Failed attempts and parkings are counted from the audit log, whose
-- records now carry their notification's site and type (the core copies
-- them onto every record it writes), so that a split reads no row.
ALTER TABLE notification_audit ADD COLUMN IF NOT EXISTS source_site text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

ALTER TABLE notification_audit ADD COLUMN IF NOT EXISTS type text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

-- Delivered rows are counted by delivered_at: the index the delivered KPI
-- reads now carries the type beside the site, so that a split by type reads
-- the index alone too. It is built beside the old one under a new name (a
-- build a stop interrupted leaves an invalid index: dropped first), then
-- the old one is dropped and the new one takes its name.
DROP INDEX CONCURRENTLY IF EXISTS notifications_delivered_0009_idx;

--bun:split

CREATE INDEX CONCURRENTLY notifications_delivered_0009_idx
    ON notifications (delivered_at) INCLUDE (source_site, type) WHERE delivered_at IS NOT NULL;

--bun:split

DROP INDEX CONCURRENTLY IF EXISTS notifications_delivered_idx;

--bun:split

ALTER INDEX notifications_delivered_0009_idx RENAME TO notifications_delivered_idx;

--bun:split

-- The records from before this migration that count (failed attempts and
-- parkings, by any actor) get their notification's site and type, in
-- batches of 1000 notifications (in id order, through the primary key and
-- the audit log's notification index), each committed on its own, so that
-- no batch holds its row locks for long. The records of purged
-- notifications keep no site nor type: they count under none.
DO $$
DECLARE
    last_id uuid := '00000000-0000-0000-0000-000000000000';
    next_id uuid;
BEGIN
    UPDATE notification_audit AS a SET source_site = n.source_site, type = n.type
        FROM notifications AS n
        WHERE n.id = last_id AND a.notification_id = n.id AND a.status IN ('Retrying', 'Parked')
          AND (a.source_site, a.type) IS DISTINCT FROM (n.source_site, n.type);
    COMMIT;
    LOOP
        next_id := NULL;
        SELECT b.id INTO next_id
            FROM (SELECT id FROM notifications WHERE id > last_id ORDER BY id LIMIT 1000) AS b
            ORDER BY b.id DESC LIMIT 1;
        EXIT WHEN next_id IS NULL;
        UPDATE notification_audit AS a SET source_site = n.source_site, type = n.type
            FROM notifications AS n
            WHERE n.id > last_id AND n.id <= next_id AND a.notification_id = n.id
              AND a.status IN ('Retrying', 'Parked')
              AND (a.source_site, a.type) IS DISTINCT FROM (n.source_site, n.type);
        COMMIT;
        last_id := next_id;
    END LOOP;
END
$$;

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time, with their site and type. Partial: the records of successful
-- attempts and deliveries, most of the log, stay out, and so do those of
-- attempts a shutdown cut short (Interrupted), which are no failures.
DROP INDEX CONCURRENTLY IF EXISTS notification_audit_failures_idx;

--bun:split

CREATE INDEX CONCURRENTLY notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (source_site, type)
    WHERE status IN ('Retrying', 'Parked') AND outcome <> 'Interrupted';
