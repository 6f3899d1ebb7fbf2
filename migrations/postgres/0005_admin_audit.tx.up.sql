-- API tokens that expire or are bound to an account, and the admin audit
-- log (PostgreSQL). A token's account is '' when the token has a role of its
-- own; otherwise the token takes the account's role at each request and the
-- store deletes it with the account. expires_at is NULL for a token that
-- never expires.
--
-- admin_audit holds one row per change to a list, a channel's settings, an
-- account or a token: who made it (actor), what (kind, name, action) and a
-- summary that never holds a secret. Rows are only appended; id orders them
-- and pages them, newest first. With several central nodes, ids are given at
-- insert and may commit out of order by a moment; a page never repeats or
-- skips a record already committed when it was read.

ALTER TABLE operator_tokens ADD COLUMN IF NOT EXISTS account text COLLATE "C" NOT NULL DEFAULT '';

--bun:split

ALTER TABLE operator_tokens ADD COLUMN IF NOT EXISTS expires_at timestamptz;

--bun:split

-- DeleteAccount: the tokens bound to one account.
CREATE INDEX IF NOT EXISTS operator_tokens_account_idx ON operator_tokens (account);

--bun:split

CREATE TABLE IF NOT EXISTS admin_audit (
    id      bigint GENERATED ALWAYS AS IDENTITY,
    at      timestamptz NOT NULL,
    actor   text COLLATE "C" NOT NULL,
    kind    text NOT NULL,
    name    text COLLATE "C" NOT NULL,
    action  text NOT NULL,
    summary text NOT NULL DEFAULT '',
    CONSTRAINT admin_audit_pkey PRIMARY KEY (id)
);

--bun:split

-- AdminRecords by kind and name, newest first.
CREATE INDEX IF NOT EXISTS admin_audit_kind_name_idx ON admin_audit (kind, name, id);
