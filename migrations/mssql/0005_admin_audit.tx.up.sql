-- API tokens that expire or are bound to an account, and the admin audit
-- log (MS SQL Server 2016 or later). The account of a token is empty when
-- the token has a role of its own; otherwise the token takes the role of the
-- account at each request and the store deletes it with the account. expires_at is NULL
-- for a token that never expires. Names have a binary collation, as in 0003.
--
-- admin_audit holds one row per change to a list, the settings of a channel, an
-- account or a token: who made it (actor), what (kind, name, action) and a
-- summary that never holds a secret. Rows are only appended; id orders them
-- and pages them, newest first.

ALTER TABLE operator_tokens ADD account nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL
    CONSTRAINT operator_tokens_account_default DEFAULT N'';

--bun:split

ALTER TABLE operator_tokens ADD expires_at datetime2(6) NULL;

--bun:split

-- DeleteAccount: the tokens bound to one account.
CREATE INDEX operator_tokens_account_idx ON operator_tokens (account);

--bun:split

CREATE TABLE admin_audit (
    id      bigint IDENTITY(1, 1) NOT NULL,
    at      datetime2(6) NOT NULL,
    actor   nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    kind    nvarchar(32) NOT NULL,
    name    nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
    action  nvarchar(32) NOT NULL,
    summary nvarchar(2000) NOT NULL DEFAULT N'',
    CONSTRAINT admin_audit_pkey PRIMARY KEY (id)
);

--bun:split

-- AdminRecords by kind and name, newest first.
CREATE INDEX admin_audit_kind_name_idx ON admin_audit (kind, name, id);
