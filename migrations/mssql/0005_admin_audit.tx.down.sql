DROP TABLE IF EXISTS admin_audit;

--bun:split

DROP INDEX IF EXISTS operator_tokens_account_idx ON operator_tokens;

--bun:split

ALTER TABLE operator_tokens DROP CONSTRAINT IF EXISTS operator_tokens_account_default;

--bun:split

ALTER TABLE operator_tokens DROP COLUMN IF EXISTS expires_at, account;
