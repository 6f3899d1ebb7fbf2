-- API tokens that expire or are bound to an account, and the admin audit
-- log (SQLite). A token's account is '' when the token has a role of its
-- own; otherwise the token takes the account's role at each request and the
-- store deletes it with the account. expires_at is NULL for a token that
-- never expires. Times are INTEGER Unix microseconds (UTC), as in 0001.
--
-- admin_audit holds one row per change to a list, a channel's settings, an
-- account or a token: who made it (actor), what (kind, name, action) and a
-- summary that never holds a secret. Rows are only appended; id orders them
-- and pages them, newest first.

ALTER TABLE operator_tokens ADD COLUMN account TEXT NOT NULL DEFAULT '';

--bun:split

ALTER TABLE operator_tokens ADD COLUMN expires_at INTEGER;

--bun:split

-- DeleteAccount: the tokens bound to one account.
CREATE INDEX IF NOT EXISTS operator_tokens_account_idx ON operator_tokens (account);

--bun:split

CREATE TABLE IF NOT EXISTS admin_audit (
    id      INTEGER PRIMARY KEY,
    at      INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    action  TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT ''
);

--bun:split

-- AdminRecords by kind and name, newest first.
CREATE INDEX IF NOT EXISTS admin_audit_kind_name_idx ON admin_audit (kind, name, id);
