-- The directory (MS SQL Server 2016 or later): notification lists and
-- channel settings, managed through the admin API. Targets are a JSON array
-- of strings, settings a JSON object of strings, both as nvarchar(max). Retry
-- intervals are whole milliseconds; times are datetime2(6) in UTC. Names and
-- types have a binary collation, so that they compare exactly (case and
-- accents count) as Go compares strings.

CREATE TABLE notification_lists (
    name       nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    type       nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    targets    nvarchar(max) NOT NULL DEFAULT N'[]',
    updated_at datetime2(6) NOT NULL,
    CONSTRAINT notification_lists_pkey PRIMARY KEY (name)
);

--bun:split

CREATE TABLE notification_channels (
    type                  nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    settings              nvarchar(max) NOT NULL DEFAULT N'{}',
    retry_backoff         nvarchar(32) NOT NULL DEFAULT N'',
    retry_max_retries     bigint NOT NULL DEFAULT 0,
    retry_interval_ms     bigint NOT NULL DEFAULT 0,
    retry_max_interval_ms bigint NOT NULL DEFAULT 0,
    rate_limit            float NOT NULL DEFAULT 0,
    updated_at            datetime2(6) NOT NULL,
    CONSTRAINT notification_channels_pkey PRIMARY KEY (type)
);
