-- Keyword search in the subject (PostgreSQL): Filter.Subject is a
-- substring match ignoring the case of ASCII letters only, which the store
-- writes as a regular expression on the subject spelling each letter in both
-- cases (subject ~ '[pP][uU][mM][pP]'). No B-tree index serves it; a pg_trgm
-- GIN index does: the planner finds through it the rows that may match a
-- keyword of three characters or more and rechecks the expression on them,
-- so the index changes only the speed (adapters/sqlstore/DESIGN.md,
-- "Keyword search"). It costs every insert about a quarter of PostgreSQL's
-- work per row (some 25 trigrams to enter).
--
-- pg_trgm ships with PostgreSQL (contrib) and is trusted since PostgreSQL 13:
-- a user with CREATE on the database may install it. When it is not
-- installed and cannot be (no such privilege, no contrib package), this
-- migration still succeeds, without the index, and says so in a NOTICE; the
-- keyword search then scans. A DBA can add it later, in the outbox's schema
-- (since 0010 the index is on notification_subjects: see that migration's
-- statement; the one below is for a database not yet at 0010):
--   CREATE EXTENSION pg_trgm;
--   CREATE INDEX notifications_subject_trgm_idx ON notifications
--       USING gin (subject gin_trgm_ops);
-- The extension lives in the schema it was installed in (by default the
-- first of the search path, here the outbox's own); the index names its
-- operator class there, so it need not be on the search path.

DO $$
DECLARE
    trgm_schema text;
BEGIN
    SELECT n.nspname INTO trgm_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NULL THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXCEPTION WHEN OTHERS THEN
            -- Not allowed or not available; or the migration of another
            -- schema installed it meanwhile, which the lookup below finds.
            RAISE NOTICE 'outbox migration 0004: cannot install pg_trgm: %', SQLERRM;
        END;
        SELECT n.nspname INTO trgm_schema
            FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
            WHERE e.extname = 'pg_trgm';
        IF trgm_schema IS NULL THEN
            RAISE NOTICE 'outbox migration 0004: no pg_trgm, so no index for the keyword search, which will scan';
            RETURN;
        END IF;
    END IF;
    BEGIN
        EXECUTE format('CREATE INDEX IF NOT EXISTS notifications_subject_trgm_idx ON notifications '
            'USING gin (subject %I.gin_trgm_ops)', trgm_schema);
    EXCEPTION WHEN insufficient_privilege OR undefined_object OR invalid_schema_name THEN
        -- pg_trgm is in a schema this user may not use.
        RAISE NOTICE 'outbox migration 0004: cannot use pg_trgm in schema %: %; the keyword search will scan',
            trgm_schema, SQLERRM;
    END;
END
$$;
