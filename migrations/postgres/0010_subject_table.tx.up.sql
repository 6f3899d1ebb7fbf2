-- Keyword search reads a table of its own (PostgreSQL): notification_subjects
-- holds each notification's id and subject, and the trigram index of 0004
-- moves onto it.
--
-- Why: a recorded outcome changes status, which indexes cover, so the
-- update is never HOT: PostgreSQL enters the new row version in every index
-- of notifications, and in a GIN index of trigrams that is some 25 entries
-- for a subject that never changes. That took about a seventh of the
-- machine's CPU per delivery at the default batch. Subjects are written
-- once and never change: here they are entered in the trigram index once,
-- at insert, and an outcome touches neither the table nor its index.
--
-- Triggers keep the table in step with notifications, whoever writes:
-- statement triggers with transition tables copy the inserted rows (an
-- insert, the store's COPY, an insert that skips ids stored already) and
-- delete the deleted ones (the purge), TRUNCATE empties both, and a row
-- trigger follows an update of the subject (none of the outbox's statements
-- writes it). The functions run with this schema's search path, whatever
-- the writer's.
--
-- The trigram index moves only where 0004 made it: an installation without
-- pg_trgm, or whose DBA dropped the index to spare its inserts, keeps its
-- keyword search without one (which then scans this narrow table rather
-- than the notifications). The triggers are made first: their lock on
-- notifications holds every writer off until the commit, so that the
-- backfill below misses no row.

CREATE TABLE IF NOT EXISTS notification_subjects (
    id      uuid NOT NULL,
    subject text NOT NULL,
    CONSTRAINT notification_subjects_pkey PRIMARY KEY (id)
) WITH (
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_insert() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO notification_subjects (id, subject) SELECT id, subject FROM inserted;
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_delete() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM notification_subjects AS s USING deleted AS d WHERE s.id = d.id;
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_update() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE notification_subjects SET subject = NEW.subject WHERE id = NEW.id;
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_truncate() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    TRUNCATE notification_subjects;
    RETURN NULL;
END
$$;

--bun:split

CREATE TRIGGER notification_subjects_insert AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION notification_subjects_insert();

--bun:split

CREATE TRIGGER notification_subjects_delete AFTER DELETE ON notifications
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION notification_subjects_delete();

--bun:split

CREATE TRIGGER notification_subjects_update AFTER UPDATE OF subject ON notifications
    FOR EACH ROW WHEN (OLD.subject IS DISTINCT FROM NEW.subject)
    EXECUTE FUNCTION notification_subjects_update();

--bun:split

CREATE TRIGGER notification_subjects_truncate AFTER TRUNCATE ON notifications
    FOR EACH STATEMENT EXECUTE FUNCTION notification_subjects_truncate();

--bun:split

INSERT INTO notification_subjects (id, subject) SELECT id, subject FROM notifications;

--bun:split

DO $$
DECLARE
    trgm_schema text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema()
            AND indexname = 'notifications_subject_trgm_idx') THEN
        RAISE NOTICE 'outbox migration 0010: no trigram index on notifications, so none on notification_subjects; the keyword search scans';
        RETURN;
    END IF;
    SELECT n.nspname INTO STRICT trgm_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    EXECUTE format('CREATE INDEX IF NOT EXISTS notification_subjects_trgm_idx ON notification_subjects '
        'USING gin (subject %I.gin_trgm_ops)', trgm_schema);
    DROP INDEX notifications_subject_trgm_idx;
END
$$;
