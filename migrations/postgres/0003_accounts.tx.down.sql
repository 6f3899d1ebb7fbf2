DROP TABLE IF EXISTS operator_sessions;

--bun:split

DROP TABLE IF EXISTS operator_tokens;

--bun:split

DROP TABLE IF EXISTS operator_accounts;
