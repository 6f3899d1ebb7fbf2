-- The notifications table and its audit log (MS SQL Server 2016 or later).
-- Times are datetime2(6) in UTC; NULL is "unset". ids are nvarchar(36) with
-- a binary collation, so that ordering by id is the order of Go strings and
-- N'...' literals compare without conversion. The table is clustered on the
-- list order (created_at, id); the primary key is nonclustered, as
-- random UUIDs make a poor clustering key. Requires QUOTED_IDENTIFIER and
-- ANSI_NULLS ON (the defaults) for the filtered indexes.

CREATE TABLE notifications (
    id                  nvarchar(36) COLLATE Latin1_General_100_BIN2 NOT NULL,
    type                nvarchar(200) NOT NULL DEFAULT N'',
    list                nvarchar(400) NOT NULL DEFAULT N'',
    subject             nvarchar(max) NOT NULL DEFAULT N'',
    body                nvarchar(max) NOT NULL DEFAULT N'',
    type_data           nvarchar(max) NULL,
    priority            int NOT NULL DEFAULT 0,
    status              nvarchar(16) NOT NULL,
    retry_count         int NOT NULL DEFAULT 0,
    last_error          nvarchar(max) NOT NULL DEFAULT N'',
    resolved_targets    nvarchar(max) NULL,
    source_site         nvarchar(200) NOT NULL DEFAULT N'',
    source_instance     nvarchar(400) NOT NULL DEFAULT N'',
    source_script       nvarchar(400) NOT NULL DEFAULT N'',
    execution_id        nvarchar(200) NOT NULL DEFAULT N'',
    parent_execution_id nvarchar(200) NOT NULL DEFAULT N'',
    site_enqueued_at    datetime2(6) NULL,
    created_at          datetime2(6) NOT NULL,
    updated_at          datetime2(6) NULL,
    last_attempt_at     datetime2(6) NULL,
    next_attempt_at     datetime2(6) NULL,
    delivered_at        datetime2(6) NULL,
    expires_at          datetime2(6) NULL,
    claimed_by          nvarchar(200) NULL,
    claimed_until       datetime2(6) NULL,
    CONSTRAINT notifications_pkey PRIMARY KEY NONCLUSTERED (id),
    CONSTRAINT notifications_status_check
        CHECK (status IN (N'Pending', N'Retrying', N'Delivered', N'Parked', N'Discarded'))
);

--bun:split

CREATE UNIQUE CLUSTERED INDEX notifications_created_idx
    ON notifications (created_at, id);

--bun:split

CREATE INDEX notifications_claim_pending_idx
    ON notifications (priority DESC, created_at, id) INCLUDE (claimed_until)
    WHERE status = N'Pending';

--bun:split

CREATE INDEX notifications_claim_retrying_idx
    ON notifications (next_attempt_at) INCLUDE (priority, claimed_until)
    WHERE status = N'Retrying';

--bun:split

-- List by status; KPIs per status and site; purge of old terminal rows.
CREATE INDEX notifications_status_created_idx
    ON notifications (status, created_at, id) INCLUDE (source_site, updated_at);

--bun:split

CREATE INDEX notifications_site_created_idx
    ON notifications (source_site, created_at, id);

--bun:split

CREATE INDEX notifications_list_created_idx
    ON notifications (list, created_at, id);

--bun:split

CREATE INDEX notifications_type_created_idx
    ON notifications (type, created_at, id);

--bun:split

CREATE INDEX notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site)
    WHERE delivered_at IS NOT NULL;


--bun:split

CREATE TABLE notification_audit (
    id              bigint IDENTITY(1, 1) NOT NULL,
    notification_id nvarchar(36) COLLATE Latin1_General_100_BIN2 NOT NULL,
    at              datetime2(6) NOT NULL,
    kind            nvarchar(32) NOT NULL,
    actor           nvarchar(400) NOT NULL DEFAULT N'',
    outcome         nvarchar(32) NOT NULL DEFAULT N'',
    status          nvarchar(16) NOT NULL DEFAULT N'',
    duration_us     bigint NOT NULL DEFAULT 0,
    error           nvarchar(max) NOT NULL DEFAULT N'',
    -- Clustered by notification: History and Forget read one range.
    CONSTRAINT notification_audit_pkey PRIMARY KEY CLUSTERED (notification_id, id)
);
