-- The throughput charts (MS SQL): delivered, failed and parked per time
-- bucket, per site or channel type.
--
-- One transaction, ordered so that notifications stays readable as long as
-- it can: the new index is built first beside the old one (an offline
-- build holds a shared lock until the commit: writes to notifications wait
-- for the migration, reads go on), and only the last two statements, the
-- drop of the old index and the rename, take the schema lock that blocks
-- reads too, until the commit right after. (ONLINE = ON would let writes
-- go on as well, but only the Enterprise and Developer editions have it.)
-- The audit log's new columns take its schema lock for the backfill:
-- histories wait for it, deliveries do not read the log.

-- Delivered rows are counted by delivered_at: the index the delivered KPI
-- reads now carries the type beside the site, so that a split by type reads
-- the index alone too.
CREATE INDEX notifications_delivered_0009_idx
    ON notifications (delivered_at) INCLUDE (source_site, type)
    WHERE delivered_at IS NOT NULL;

--bun:split

-- Failed attempts and parkings are counted from the audit log, whose
-- records now carry the site and the type of their notification (the core
-- copies them onto every record it writes), so that a split reads no row.
-- The records that count are filled from their rows, when there are any.
ALTER TABLE notification_audit ADD source_site nvarchar(200) NOT NULL
    CONSTRAINT notification_audit_source_site_default DEFAULT N'';

--bun:split

ALTER TABLE notification_audit ADD type nvarchar(200) NOT NULL
    CONSTRAINT notification_audit_type_default DEFAULT N'';

--bun:split

IF EXISTS (SELECT 1 FROM notification_audit WHERE status IN (N'Retrying', N'Parked'))
    UPDATE a SET a.source_site = n.source_site, a.type = n.type
        FROM notification_audit AS a JOIN notifications AS n ON n.id = a.notification_id
        WHERE a.status IN (N'Retrying', N'Parked');

--bun:split

-- Failed attempts (Attempted, Retrying) and parkings (Parked, Parked) by
-- time, with their site and type. Filtered: the records of successful
-- attempts and deliveries, most of the log, stay out, and so do those of
-- attempts a shutdown cut short (Interrupted), which are no failures.
CREATE INDEX notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (source_site, type)
    WHERE status IN (N'Retrying', N'Parked') AND outcome <> N'Interrupted';

--bun:split

DROP INDEX notifications_delivered_idx ON notifications;

--bun:split

EXEC sp_rename N'notifications.notifications_delivered_0009_idx', N'notifications_delivered_idx', N'INDEX';
