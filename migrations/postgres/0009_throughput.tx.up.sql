-- The throughput charts (PostgreSQL): delivered, failed and parked per time
-- bucket, per site or channel type.
--
-- One transaction, so that a stop or an error at any point leaves the
-- database as it was and the migration runs again whole. Its statements are
-- ordered by the locks they hold until the commit:
--   - notification_audit: the ALTER TABLEs take its exclusive lock first, so
--     reads of a notification's history wait for the whole migration (the
--     backfill and the index build: seconds at a million rows);
--   - notifications: the new index's build takes a share lock (writes wait,
--     reads go on), and only the last two statements, the drop of the old
--     index and the rename, take its exclusive lock, for the moment before
--     the commit.
-- Run `outbox migrate up` before the rollout rather than at a node's start
-- when the audit log is large.

-- Failed attempts and parkings are counted from the audit log, whose
-- records now carry their notification's site and type (the core copies
-- them onto every record it writes), so that a split reads no row. A
-- default on a new column rewrites no row.
ALTER TABLE notification_audit ADD COLUMN IF NOT EXISTS source_site text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

ALTER TABLE notification_audit ADD COLUMN IF NOT EXISTS type text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

-- The records from before this migration that count (failed attempts and
-- parkings, by any actor) get their notification's site and type. The
-- records of purged notifications keep none: they count under none.
UPDATE notification_audit AS a SET source_site = n.source_site, type = n.type
    FROM notifications AS n
    WHERE n.id = a.notification_id AND a.status IN ('Retrying', 'Parked');

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time, with their site and type. Partial: the records of successful
-- attempts and deliveries, most of the log, stay out, and so do those of
-- attempts a shutdown cut short (Interrupted), which are no failures.
CREATE INDEX IF NOT EXISTS notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (source_site, type)
    WHERE status IN ('Retrying', 'Parked') AND outcome <> 'Interrupted';

--bun:split

-- Delivered rows are counted by delivered_at: the index the delivered KPI
-- reads now carries the type beside the site, so that a split by type reads
-- the index alone too. Built beside the old one, which is dropped last.
CREATE INDEX IF NOT EXISTS notifications_delivered_0009_idx
    ON notifications (delivered_at) INCLUDE (source_site, type) WHERE delivered_at IS NOT NULL;

--bun:split

DROP INDEX IF EXISTS notifications_delivered_idx;

--bun:split

ALTER INDEX notifications_delivered_0009_idx RENAME TO notifications_delivered_idx;
