-- The mirror at central of the cached operations of the sites (MS SQL Server 2016 or later): one row
-- per (site, tracked operation id), as the site last reported it, with
-- the command of an operator relayed and not yet confirmed (requested, "" when
-- none); the commands relayed to sites; the reconciliation cursor per site;
-- the latest health of each site node (a JSON document no query looks
-- inside). Times are datetime2(6) in UTC; texts that keys and indexes hold
-- have a binary collation, so that the newest-first keyset pages in the
-- order of Go strings (code points), and are bounded as central bounds
-- what a site reports.

CREATE TABLE site_calls (
    site                nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    id                  nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL,
    kind                nvarchar(32) COLLATE Latin1_General_100_BIN2 NOT NULL,
    target              nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    method              nvarchar(200) NOT NULL DEFAULT N'',
    status              nvarchar(16) COLLATE Latin1_General_100_BIN2 NOT NULL,
    retry_count         bigint NOT NULL DEFAULT 0,
    last_error          nvarchar(max) NOT NULL DEFAULT N'',
    next_attempt_at     datetime2(6),
    source_instance     nvarchar(200) NOT NULL DEFAULT N'',
    source_script       nvarchar(200) NOT NULL DEFAULT N'',
    execution_id        nvarchar(200) NOT NULL DEFAULT N'',
    parent_execution_id nvarchar(200) NOT NULL DEFAULT N'',
    created_at          datetime2(6) NOT NULL,
    updated_at          datetime2(6),
    terminal_at         datetime2(6),
    version             bigint NOT NULL,
    reported_at         datetime2(6) NOT NULL,
    requested           nvarchar(16) NOT NULL DEFAULT N'',
    requested_by        nvarchar(200) NOT NULL DEFAULT N'',
    requested_at        datetime2(6),
    CONSTRAINT site_calls_pkey PRIMARY KEY (site, id)
);

--bun:split

-- QuerySiteCalls, newest first, unfiltered or filtered by anything but the site.
CREATE INDEX site_calls_created_idx ON site_calls (created_at DESC, site DESC, id DESC);

--bun:split

-- QuerySiteCalls of one site, newest first.
CREATE INDEX site_calls_site_created_idx ON site_calls (site, created_at DESC, id DESC);

--bun:split

-- SiteCallKPIs: the buffered rows per site and status.
CREATE INDEX site_calls_buffered_idx ON site_calls (site, status, created_at)
    WHERE status IN (N'Pending', N'Retrying', N'Parked');

--bun:split

-- SiteCallKPIs (Failed in a window) and PurgeSiteCalls: terminal rows by when they ended.
CREATE INDEX site_calls_terminal_idx ON site_calls (terminal_at, site, id)
    WHERE terminal_at IS NOT NULL;

--bun:split

CREATE TABLE site_commands (
    id           nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL,
    site         nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    operation_id nvarchar(64) COLLATE Latin1_General_100_BIN2 NOT NULL,
    action       nvarchar(16) NOT NULL,
    actor        nvarchar(200) NOT NULL,
    requested_at datetime2(6) NOT NULL,
    state        nvarchar(16) COLLATE Latin1_General_100_BIN2 NOT NULL,
    result       nvarchar(max) NOT NULL DEFAULT N'',
    finished_at  datetime2(6),
    CONSTRAINT site_commands_pkey PRIMARY KEY (id)
);

--bun:split

-- PendingSiteCommands: the requested commands of a site, oldest first.
CREATE INDEX site_commands_pending_idx ON site_commands (site, requested_at, id)
    WHERE state = N'Requested';

--bun:split

-- SiteCommands: the history of one operation.
CREATE INDEX site_commands_operation_idx ON site_commands (site, operation_id, requested_at, id);

--bun:split

-- PurgeSiteCalls: finished commands by when they finished.
CREATE INDEX site_commands_finished_idx ON site_commands (finished_at)
    WHERE finished_at IS NOT NULL;

--bun:split

CREATE TABLE site_cursors (
    site  nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    feed_epoch nvarchar(512) NOT NULL DEFAULT N'',
    feed_after nvarchar(512) NOT NULL DEFAULT N'',
    CONSTRAINT site_cursors_pkey PRIMARY KEY (site)
);

--bun:split

CREATE TABLE site_health (
    site        nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    node        nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    reported_at datetime2(6) NOT NULL,
    health      nvarchar(max) NOT NULL,
    CONSTRAINT site_health_pkey PRIMARY KEY (site, node)
);
