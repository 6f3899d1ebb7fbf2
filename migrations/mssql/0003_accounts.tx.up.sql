-- Operator accounts, API tokens and sessions (MS SQL Server 2016 or later).
-- The hashes are computed by the core and kept as varbinary(max):
-- bcrypt for passwords, SHA-256 for the secret part of a token. The id of a
-- session is the hex SHA-256 of its secret, so the table holds nothing a
-- thief could log in with. Times are datetime2(6) in UTC. Names and ids
-- have a binary collation, so that they compare exactly (case and accents
-- count) as Go compares strings; names are at most 400 characters, ids 200.
-- A session names its account without a foreign key: the store deletes the
-- sessions of an account with it.

CREATE TABLE operator_accounts (
    name          nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    role          nvarchar(32) NOT NULL,
    password_hash varbinary(max) NOT NULL,
    created_at    datetime2(6) NOT NULL,
    updated_at    datetime2(6) NOT NULL,
    CONSTRAINT operator_accounts_pkey PRIMARY KEY (name)
);

--bun:split

CREATE TABLE operator_tokens (
    id         nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    name       nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    role       nvarchar(32) NOT NULL,
    hash       varbinary(max) NOT NULL,
    created_at datetime2(6) NOT NULL,
    CONSTRAINT operator_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT operator_tokens_name_key UNIQUE (name)
);

--bun:split

CREATE TABLE operator_sessions (
    id         nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    account    nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    created_at datetime2(6) NOT NULL,
    expires_at datetime2(6) NOT NULL,
    CONSTRAINT operator_sessions_pkey PRIMARY KEY (id)
);

--bun:split

-- DeleteSessions and DeleteAccount: the sessions of one account.
CREATE INDEX operator_sessions_account_idx ON operator_sessions (account);

--bun:split

-- DeleteExpiredSessions: the sessions expired by an instant.
CREATE INDEX operator_sessions_expires_idx ON operator_sessions (expires_at);
