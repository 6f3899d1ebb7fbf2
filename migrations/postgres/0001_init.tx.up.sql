-- The notifications table and its audit log (PostgreSQL).
-- Times are timestamptz (microsecond precision, UTC); NULL is "unset".
-- ids are uuid: 16 bytes that compare with memcmp, in the byte order of
-- their canonical lowercase text (as Go orders the strings); the store reads
-- them back in that text form. The text columns that indexes or joins
-- compare use the "C" collation (plain byte comparison; equality is the
-- same in every deterministic collation, and nothing sorts on them in SQL).

CREATE TABLE IF NOT EXISTS notifications (
    id                  uuid NOT NULL,
    type                text COLLATE "C" NOT NULL DEFAULT '',
    list                text COLLATE "C" NOT NULL DEFAULT '',
    subject             text NOT NULL DEFAULT '',
    body                text NOT NULL DEFAULT '',
    type_data           text,
    priority            integer NOT NULL DEFAULT 0,
    status              text COLLATE "C" NOT NULL,
    retry_count         integer NOT NULL DEFAULT 0,
    last_error          text NOT NULL DEFAULT '',
    resolved_targets    text,
    source_site         text COLLATE "C" NOT NULL DEFAULT '',
    source_instance     text NOT NULL DEFAULT '',
    source_script       text NOT NULL DEFAULT '',
    execution_id        text NOT NULL DEFAULT '',
    parent_execution_id text NOT NULL DEFAULT '',
    site_enqueued_at    timestamptz,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz,
    last_attempt_at     timestamptz,
    next_attempt_at     timestamptz,
    delivered_at        timestamptz,
    expires_at          timestamptz,
    claimed_by          text COLLATE "C",
    claimed_until       timestamptz,
    CONSTRAINT notifications_pkey PRIMARY KEY (id),
    CONSTRAINT notifications_status_check
        CHECK (status IN ('Pending', 'Retrying', 'Delivered', 'Parked', 'Discarded'))
) WITH (
    -- Room on each page for a second version of every row, so that leasing
    -- a row (claimed_by, claimed_until: no index covers them) is a HOT
    -- update that touches no index, and its Record lands on the same page.
    fillfactor = 50,
    -- A queue table churns: vacuum and analyze it early, so that dead
    -- tuples do not pile up in the claim index and the planner knows the
    -- Pending share.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

--bun:split

-- Claim, Pending part: due at once, taken by priority, then age, then id.
CREATE INDEX IF NOT EXISTS notifications_claim_pending_idx
    ON notifications (priority DESC, created_at, id) WHERE status = 'Pending';

--bun:split

-- Claim, Retrying part: due once next_attempt_at has come.
CREATE INDEX IF NOT EXISTS notifications_claim_retrying_idx
    ON notifications (next_attempt_at) WHERE status = 'Retrying';

--bun:split

-- Indexes are ascending: new rows (newest created_at) append at their
-- right edge, and newest-first lists scan them backwards.

-- List paging, newest first, unfiltered or by time range or subject.
CREATE INDEX IF NOT EXISTS notifications_created_idx
    ON notifications (created_at, id);

--bun:split

-- List by status; KPIs per status and site (source_site rides along);
-- purge of old terminal rows and "parked since" filters (the oldest rows
-- come first, and purgeable rows are the oldest).
CREATE INDEX IF NOT EXISTS notifications_status_created_idx
    ON notifications (status, created_at, id) INCLUDE (source_site);

--bun:split

CREATE INDEX IF NOT EXISTS notifications_site_created_idx
    ON notifications (source_site, created_at, id);

--bun:split

CREATE INDEX IF NOT EXISTS notifications_list_created_idx
    ON notifications (list, created_at, id);

--bun:split

CREATE INDEX IF NOT EXISTS notifications_type_created_idx
    ON notifications (type, created_at, id);

--bun:split

-- KPIs: delivered since an instant, per site.
CREATE INDEX IF NOT EXISTS notifications_delivered_idx
    ON notifications (delivered_at) INCLUDE (source_site) WHERE delivered_at IS NOT NULL;


--bun:split

CREATE TABLE IF NOT EXISTS notification_audit (
    -- Append order; no index needs it (History sorts the few rows of one
    -- notification), so it is not a primary key: one index less per record.
    id              bigint GENERATED ALWAYS AS IDENTITY,
    notification_id uuid NOT NULL,
    at              timestamptz NOT NULL,
    kind            text NOT NULL,
    actor           text NOT NULL DEFAULT '',
    outcome         text NOT NULL DEFAULT '',
    status          text NOT NULL DEFAULT '',
    duration_us     bigint NOT NULL DEFAULT 0,
    error           text NOT NULL DEFAULT ''
);

--bun:split

CREATE INDEX IF NOT EXISTS notification_audit_notification_idx
    ON notification_audit (notification_id);
