-- The mirror at central of the cached operations of the sites (SQLite): one row
-- per (site, tracked operation id), as the site last reported it, with
-- the command of an operator relayed and not yet confirmed (requested, "" when
-- none); the commands relayed to sites; the reconciliation cursor per site;
-- the latest health of each site node (a JSON document no query looks
-- inside). Times are INTEGER Unix microseconds (UTC), as in 0001; texts
-- compare with the BINARY collation, the byte order of Go strings.

CREATE TABLE IF NOT EXISTS site_calls (
    site                TEXT NOT NULL,
    id                  TEXT NOT NULL,
    kind                TEXT NOT NULL,
    target              TEXT NOT NULL,
    method              TEXT NOT NULL DEFAULT '',
    status              TEXT NOT NULL,
    retry_count         INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT NOT NULL DEFAULT '',
    next_attempt_at     INTEGER,
    source_instance     TEXT NOT NULL DEFAULT '',
    source_script       TEXT NOT NULL DEFAULT '',
    execution_id        TEXT NOT NULL DEFAULT '',
    parent_execution_id TEXT NOT NULL DEFAULT '',
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER,
    terminal_at         INTEGER,
    version             INTEGER NOT NULL,
    reported_at         INTEGER NOT NULL,
    requested           TEXT NOT NULL DEFAULT '',
    requested_by        TEXT NOT NULL DEFAULT '',
    requested_at        INTEGER,
    CONSTRAINT site_calls_pkey PRIMARY KEY (site, id)
);

--bun:split

-- QuerySiteCalls, newest first, unfiltered or filtered by anything but the site.
CREATE INDEX IF NOT EXISTS site_calls_created_idx ON site_calls (created_at DESC, site DESC, id DESC);

--bun:split

-- QuerySiteCalls of one site, newest first.
CREATE INDEX IF NOT EXISTS site_calls_site_created_idx ON site_calls (site, created_at DESC, id DESC);

--bun:split

-- SiteCallKPIs: the buffered rows per site and status.
CREATE INDEX IF NOT EXISTS site_calls_buffered_idx ON site_calls (site, status, created_at)
    WHERE status IN ('Pending', 'Retrying', 'Parked');

--bun:split

-- SiteCallKPIs (Failed in a window) and PurgeSiteCalls: terminal rows by when they ended.
CREATE INDEX IF NOT EXISTS site_calls_terminal_idx ON site_calls (terminal_at, site, id)
    WHERE terminal_at IS NOT NULL;

--bun:split

CREATE TABLE IF NOT EXISTS site_commands (
    id           TEXT NOT NULL,
    site         TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    action       TEXT NOT NULL,
    actor        TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    state        TEXT NOT NULL,
    result       TEXT NOT NULL DEFAULT '',
    finished_at  INTEGER,
    CONSTRAINT site_commands_pkey PRIMARY KEY (id)
);

--bun:split

-- PendingSiteCommands: the requested commands of a site, oldest first.
CREATE INDEX IF NOT EXISTS site_commands_pending_idx ON site_commands (site, requested_at, id)
    WHERE state = 'Requested';

--bun:split

-- SiteCommands: the history of one operation.
CREATE INDEX IF NOT EXISTS site_commands_operation_idx ON site_commands (site, operation_id, requested_at, id);

--bun:split

-- PurgeSiteCalls: finished commands by when they finished.
CREATE INDEX IF NOT EXISTS site_commands_finished_idx ON site_commands (finished_at)
    WHERE finished_at IS NOT NULL;

--bun:split

CREATE TABLE IF NOT EXISTS site_cursors (
    site  TEXT NOT NULL,
    feed_epoch TEXT NOT NULL DEFAULT '',
    feed_after TEXT NOT NULL DEFAULT '',
    CONSTRAINT site_cursors_pkey PRIMARY KEY (site)
);

--bun:split

CREATE TABLE IF NOT EXISTS site_health (
    site        TEXT NOT NULL,
    node        TEXT NOT NULL,
    reported_at INTEGER NOT NULL,
    health      TEXT NOT NULL,
    CONSTRAINT site_health_pkey PRIMARY KEY (site, node)
);
