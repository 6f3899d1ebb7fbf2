-- The mirror at central of the cached operations of the sites (PostgreSQL): one row
-- per (site, tracked operation id), as the site last reported it, with
-- the command of an operator relayed and not yet confirmed (requested, "" when
-- none); the commands relayed to sites; the reconciliation cursor per site;
-- the latest health of each site node (a JSON document no query looks
-- inside). Texts that indexes order use the "C" collation, so that the
-- newest-first keyset pages in the byte order of Go strings.

CREATE TABLE IF NOT EXISTS site_calls (
    site                text COLLATE "C" NOT NULL,
    id                  text COLLATE "C" NOT NULL,
    kind                text COLLATE "C" NOT NULL,
    target              text COLLATE "C" NOT NULL,
    method              text NOT NULL DEFAULT '',
    status              text COLLATE "C" NOT NULL,
    retry_count         bigint NOT NULL DEFAULT 0,
    last_error          text NOT NULL DEFAULT '',
    next_attempt_at     timestamptz,
    source_instance     text NOT NULL DEFAULT '',
    source_script       text NOT NULL DEFAULT '',
    execution_id        text NOT NULL DEFAULT '',
    parent_execution_id text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz,
    terminal_at         timestamptz,
    version             bigint NOT NULL,
    reported_at         timestamptz NOT NULL,
    requested           text COLLATE "C" NOT NULL DEFAULT '',
    requested_by        text NOT NULL DEFAULT '',
    requested_at        timestamptz,
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
    id           text COLLATE "C" NOT NULL,
    site         text COLLATE "C" NOT NULL,
    operation_id text COLLATE "C" NOT NULL,
    action       text NOT NULL,
    actor        text NOT NULL,
    requested_at timestamptz NOT NULL,
    state        text COLLATE "C" NOT NULL,
    result       text NOT NULL DEFAULT '',
    finished_at  timestamptz,
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
    site  text COLLATE "C" NOT NULL,
    feed_epoch text NOT NULL DEFAULT '',
    feed_after text NOT NULL DEFAULT '',
    CONSTRAINT site_cursors_pkey PRIMARY KEY (site)
);

--bun:split

CREATE TABLE IF NOT EXISTS site_health (
    site        text COLLATE "C" NOT NULL,
    node        text COLLATE "C" NOT NULL,
    reported_at timestamptz NOT NULL,
    health      text NOT NULL,
    CONSTRAINT site_health_pkey PRIMARY KEY (site, node)
);

--bun:split

-- QuerySiteCalls by keyword: a pg_trgm GIN index on the six texts the
-- keyword is looked for in, joined by spaces (the expression the store
-- writes, siteCallKeywordText). A row holding the keyword in one of them
-- holds it in the joined text, so the store adds the joined text's match to
-- the six columns' own, and the planner finds the candidates through the
-- index; the columns' own matches decide. Without pg_trgm (see 0004) the
-- migration succeeds without the index, and the keyword search scans.
DO $$
DECLARE
    trgm_schema text;
BEGIN
    SELECT n.nspname INTO trgm_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NULL THEN
        RAISE NOTICE 'outbox migration 0007: no pg_trgm, so no index for the keyword search of site calls, which will scan';
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('CREATE INDEX IF NOT EXISTS site_calls_keyword_trgm_idx ON site_calls USING gin ('
            '("id" || '' '' || "target" || '' '' || "method" || '' '' || "last_error" || '' '' || '
            '"source_instance" || '' '' || "source_script") %I.gin_trgm_ops)', trgm_schema);
    EXCEPTION WHEN insufficient_privilege OR undefined_object OR invalid_schema_name THEN
        RAISE NOTICE 'outbox migration 0007: cannot use pg_trgm in schema %: %; the keyword search of site calls will scan',
            trgm_schema, SQLERRM;
    END;
END
$$;
