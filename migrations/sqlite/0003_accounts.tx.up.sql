-- Operator accounts, API tokens and sessions (SQLite). The hashes are
-- computed by the core and kept as BLOBs: bcrypt for passwords, SHA-256 for
-- the secret part of a token. The id of a session is the hex SHA-256 of its
-- secret, so the table holds nothing a thief could log in with. Times are
-- INTEGER Unix microseconds (UTC), as in 0001. Names and ids compare
-- bytewise (BINARY collation). A session names its account without a
-- foreign key: the store deletes the sessions of an account with it.

CREATE TABLE IF NOT EXISTS operator_accounts (
    name          TEXT NOT NULL PRIMARY KEY,
    role          TEXT NOT NULL,
    password_hash BLOB NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

--bun:split

CREATE TABLE IF NOT EXISTS operator_tokens (
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    role       TEXT NOT NULL,
    hash       BLOB NOT NULL,
    created_at INTEGER NOT NULL
);

--bun:split

CREATE TABLE IF NOT EXISTS operator_sessions (
    id         TEXT NOT NULL PRIMARY KEY,
    account    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

--bun:split

-- DeleteSessions and DeleteAccount: the sessions of one account.
CREATE INDEX IF NOT EXISTS operator_sessions_account_idx ON operator_sessions (account);

--bun:split

-- DeleteExpiredSessions: the sessions expired by an instant.
CREATE INDEX IF NOT EXISTS operator_sessions_expires_idx ON operator_sessions (expires_at);
