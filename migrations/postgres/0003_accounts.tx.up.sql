-- Operator accounts, API tokens and sessions (PostgreSQL). The hashes
-- are computed by the core and kept as bytea: bcrypt for passwords, SHA-256
-- for the secret part of a token. The id of a session is the hex SHA-256 of
-- its secret, so the table holds nothing a thief could log in with. Names
-- and ids use the "C" collation: byte comparison, as Go compares strings. A
-- session names its account without a foreign key: the store deletes the
-- sessions of an account with it.

CREATE TABLE IF NOT EXISTS operator_accounts (
    name          text COLLATE "C" NOT NULL,
    role          text NOT NULL,
    password_hash bytea NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    CONSTRAINT operator_accounts_pkey PRIMARY KEY (name)
);

--bun:split

CREATE TABLE IF NOT EXISTS operator_tokens (
    id         text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    role       text NOT NULL,
    hash       bytea NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT operator_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT operator_tokens_name_key UNIQUE (name)
);

--bun:split

CREATE TABLE IF NOT EXISTS operator_sessions (
    id         text COLLATE "C" NOT NULL,
    account    text COLLATE "C" NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT operator_sessions_pkey PRIMARY KEY (id)
);

--bun:split

-- DeleteSessions and DeleteAccount: the sessions of one account.
CREATE INDEX IF NOT EXISTS operator_sessions_account_idx ON operator_sessions (account);

--bun:split

-- DeleteExpiredSessions: the sessions expired by an instant.
CREATE INDEX IF NOT EXISTS operator_sessions_expires_idx ON operator_sessions (expires_at);
