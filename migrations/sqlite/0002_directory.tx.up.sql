-- The directory (SQLite): notification lists and channel settings, managed
-- through the admin API. Targets are a JSON array of strings, settings a
-- JSON object of strings. Retry intervals are whole milliseconds; times are
-- INTEGER Unix microseconds (UTC), as in 0001. Names and types compare
-- bytewise (BINARY collation).

CREATE TABLE IF NOT EXISTS notification_lists (
    name       TEXT NOT NULL PRIMARY KEY,
    type       TEXT NOT NULL,
    targets    TEXT NOT NULL DEFAULT '[]',
    updated_at INTEGER NOT NULL
);

--bun:split

CREATE TABLE IF NOT EXISTS notification_channels (
    type                  TEXT NOT NULL PRIMARY KEY,
    settings              TEXT NOT NULL DEFAULT '{}',
    retry_backoff         TEXT NOT NULL DEFAULT '',
    retry_max_retries     INTEGER NOT NULL DEFAULT 0,
    retry_interval_ms     INTEGER NOT NULL DEFAULT 0,
    retry_max_interval_ms INTEGER NOT NULL DEFAULT 0,
    rate_limit            REAL NOT NULL DEFAULT 0,
    updated_at            INTEGER NOT NULL
);
