DROP TABLE IF EXISTS admin_audit;

--bun:split

DROP INDEX IF EXISTS operator_tokens_account_idx;

--bun:split

ALTER TABLE operator_tokens DROP COLUMN expires_at;

--bun:split

ALTER TABLE operator_tokens DROP COLUMN account;
