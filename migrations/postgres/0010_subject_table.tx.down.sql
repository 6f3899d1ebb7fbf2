-- The trigram index goes back onto notifications where this migration had
-- moved it (built under a lock that holds writers of notifications off,
-- as long as 0010's build took), and the table of subjects and its
-- triggers go.

DO $$
DECLARE
    trgm_schema text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema()
            AND indexname = 'notification_subjects_trgm_idx') THEN
        RETURN;
    END IF;
    SELECT n.nspname INTO STRICT trgm_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    EXECUTE format('CREATE INDEX IF NOT EXISTS notifications_subject_trgm_idx ON notifications '
        'USING gin (subject %I.gin_trgm_ops)', trgm_schema);
END
$$;

--bun:split

DROP TRIGGER IF EXISTS notification_subjects_insert ON notifications;

--bun:split

DROP TRIGGER IF EXISTS notification_subjects_delete ON notifications;

--bun:split

DROP TRIGGER IF EXISTS notification_subjects_update ON notifications;

--bun:split

DROP TRIGGER IF EXISTS notification_subjects_truncate ON notifications;

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_insert();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_delete();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_update();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_truncate();

--bun:split

DROP TABLE IF EXISTS notification_subjects;
