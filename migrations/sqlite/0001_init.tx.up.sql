-- The notifications table and its audit log (SQLite).
-- Times are INTEGER Unix microseconds (UTC): they sort and compare as numbers
-- and keep microsecond precision. NULL is "unset". Text compares bytewise
-- (BINARY collation), so ordering by id is the order of Go strings.

CREATE TABLE IF NOT EXISTS notifications (
    id                  TEXT NOT NULL PRIMARY KEY,
    type                TEXT NOT NULL DEFAULT '',
    list                TEXT NOT NULL DEFAULT '',
    subject             TEXT NOT NULL DEFAULT '',
    body                TEXT NOT NULL DEFAULT '',
    type_data           TEXT,
    priority            INTEGER NOT NULL DEFAULT 0,
    status              TEXT NOT NULL
        CHECK (status IN ('Pending', 'Retrying', 'Delivered', 'Parked', 'Discarded')),
    retry_count         INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT NOT NULL DEFAULT '',
    resolved_targets    TEXT,
    source_site         TEXT NOT NULL DEFAULT '',
    source_instance     TEXT NOT NULL DEFAULT '',
    source_script       TEXT NOT NULL DEFAULT '',
    execution_id        TEXT NOT NULL DEFAULT '',
    parent_execution_id TEXT NOT NULL DEFAULT '',
    site_enqueued_at    INTEGER,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER,
    last_attempt_at     INTEGER,
    next_attempt_at     INTEGER,
    delivered_at        INTEGER,
    expires_at          INTEGER,
    claimed_by          TEXT,
    claimed_until       INTEGER
);

--bun:split

CREATE INDEX IF NOT EXISTS notifications_claim_pending_idx
    ON notifications (priority DESC, created_at, id) WHERE status = 'Pending';

--bun:split

CREATE INDEX IF NOT EXISTS notifications_claim_retrying_idx
    ON notifications (next_attempt_at) WHERE status = 'Retrying';

--bun:split

-- Indexes are ascending: new rows (newest created_at) append at their
-- right edge, and newest-first lists scan them backwards. The claim reads
-- its two partial indexes by name (INDEXED BY).
CREATE INDEX IF NOT EXISTS notifications_created_idx
    ON notifications (created_at, id);

--bun:split

-- List by status; purge of old terminal rows.
CREATE INDEX IF NOT EXISTS notifications_status_created_idx
    ON notifications (status, created_at, id);

--bun:split

-- KPIs: SQLite groups by sorting, so the index yields the groups in order
-- (status, site). Partial: Delivered rows, most of the table, stay out.
CREATE INDEX IF NOT EXISTS notifications_kpi_idx
    ON notifications (status, source_site, created_at)
    WHERE status IN ('Pending', 'Retrying', 'Parked');

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

CREATE INDEX IF NOT EXISTS notifications_delivered_idx
    ON notifications (delivered_at, source_site) WHERE delivered_at IS NOT NULL;


--bun:split

CREATE TABLE IF NOT EXISTS notification_audit (
    id              INTEGER PRIMARY KEY,
    notification_id TEXT NOT NULL,
    at              INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    actor           TEXT NOT NULL DEFAULT '',
    outcome         TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL DEFAULT '',
    duration_us     INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT ''
);

--bun:split

-- History in (at, append order): the index carries the rowid (id) last.
CREATE INDEX IF NOT EXISTS notification_audit_notification_idx
    ON notification_audit (notification_id, at);
