-- The directory (PostgreSQL): notification lists and channel settings,
-- managed through the admin API. Targets are a JSON array of strings,
-- settings a JSON object of strings, both as text (the store encodes and
-- decodes them; nothing queries inside). Retry intervals are whole
-- milliseconds. Names and types use the "C" collation: byte comparison, as
-- Go compares strings.

CREATE TABLE IF NOT EXISTS notification_lists (
    name       text COLLATE "C" NOT NULL,
    type       text COLLATE "C" NOT NULL,
    targets    text NOT NULL DEFAULT '[]',
    updated_at timestamptz NOT NULL,
    CONSTRAINT notification_lists_pkey PRIMARY KEY (name)
);

--bun:split

CREATE TABLE IF NOT EXISTS notification_channels (
    type                  text COLLATE "C" NOT NULL,
    settings              text NOT NULL DEFAULT '{}',
    retry_backoff         text NOT NULL DEFAULT '',
    retry_max_retries     bigint NOT NULL DEFAULT 0,
    retry_interval_ms     bigint NOT NULL DEFAULT 0,
    retry_max_interval_ms bigint NOT NULL DEFAULT 0,
    rate_limit            double precision NOT NULL DEFAULT 0,
    updated_at            timestamptz NOT NULL,
    CONSTRAINT notification_channels_pkey PRIMARY KEY (type)
);
