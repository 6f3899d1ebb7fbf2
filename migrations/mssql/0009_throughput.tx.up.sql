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

-- Failed attempts and parkings are counted from the audit log, whose
-- records now carry the site and the type of their notification (the
-- dispatcher copies them), so that a split reads no row. The records that
-- count are filled from their rows, when there are any.
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
-- attempts and deliveries, most of the log, stay out.
CREATE INDEX notification_audit_failures_idx
    ON notification_audit (kind, status, at) INCLUDE (source_site, type)
    WHERE status IN (N'Retrying', N'Parked');
