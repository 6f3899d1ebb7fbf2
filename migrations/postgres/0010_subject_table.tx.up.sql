-- Keyword search reads a table of its own (PostgreSQL): notification_subjects
-- holds each notification's id and subject, and the trigram index of 0004
-- moves onto it.
--
-- Why: a recorded outcome changes status, which indexes cover, so the
-- update is never HOT: PostgreSQL enters the new row version in every index
-- of notifications, and in a GIN index of trigrams that is some 25 entries
-- for a subject that never changes. Subjects are written once and never
-- change: here they are entered in the trigram index once, at insert, and
-- an outcome touches neither the table nor its index.
--
-- Triggers keep the table in step with notifications: statement triggers
-- with transition tables copy the inserted rows (an insert, the store's
-- COPY, an insert that skips ids stored already) and delete the deleted
-- ones (the purge), TRUNCATE empties both, and a row trigger follows an
-- update of an id or a subject (none of the outbox's statements writes
-- either). Each names the table in the schema of the notifications that
-- fired it, whatever the writer's search path (a temporary table of that
-- name cannot take its rows). They run with the writer's rights, so the
-- table gets the grants notifications has, for a role that reads or
-- writes through grants rather than as the owner.
--
-- The trigram index moves only where 0004 made it: an installation without
-- pg_trgm, or whose DBA dropped the index to spare its inserts, keeps its
-- keyword search without one (which then scans this narrow table rather
-- than the notifications). A DBA can add it later, in the outbox's schema:
--   CREATE INDEX notification_subjects_trgm_idx ON notification_subjects
--       USING gin (subject gin_trgm_ops);
--
-- The first statement takes the lock that holds every writer of
-- notifications off until the commit, so that the copy below misses no row
-- (first, so that a transaction of REPEATABLE READ takes its snapshot only
-- once the writers before it are done). Readers go on until the last
-- statement of the index's move, which drops the old index. On the
-- development machine the whole migration took 5.7-6.1 s at 1,000,000 rows
-- (subjects of some 20 characters): writers wait that long (a node's ingest answers late, the
-- sites keep their notifications and send them again), so run
-- `outbox migrate up` before the rollout when the table is large.

LOCK TABLE notifications IN SHARE ROW EXCLUSIVE MODE;

--bun:split

CREATE TABLE IF NOT EXISTS notification_subjects (
    id      uuid NOT NULL,
    subject text NOT NULL,
    CONSTRAINT notification_subjects_pkey PRIMARY KEY (id)
) WITH (
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

--bun:split

-- The grants of notifications, for roles that write or read through them.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.privilege_type, a.is_grantable,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee
        FROM pg_class c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS a
        LEFT JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.oid = 'notifications'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON notification_subjects TO %s%s', g.privilege_type, g.grantee,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I.notification_subjects (id, subject) SELECT id, subject FROM inserted',
        TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.notification_subjects AS s USING deleted AS d WHERE s.id = d.id',
        TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('UPDATE %I.notification_subjects SET id = $1, subject = $2 WHERE id = $3', TG_TABLE_SCHEMA)
        USING NEW.id, NEW.subject, OLD.id;
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_subjects_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('TRUNCATE %I.notification_subjects', TG_TABLE_SCHEMA);
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

CREATE TRIGGER notification_subjects_update AFTER UPDATE OF id, subject ON notifications
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.subject IS DISTINCT FROM NEW.subject)
    EXECUTE FUNCTION notification_subjects_update();

--bun:split

CREATE TRIGGER notification_subjects_truncate AFTER TRUNCATE ON notifications
    FOR EACH STATEMENT EXECUTE FUNCTION notification_subjects_truncate();

--bun:split

INSERT INTO notification_subjects (id, subject) SELECT id, subject FROM notifications;

--bun:split

-- The index moves where 0004 made it. When pg_trgm's schema is closed to
-- this user now (as 0004 allows for), the old index goes all the same (no
-- query reads it any more, and every delivery paid for it) and the search
-- scans, with a NOTICE.
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
    BEGIN
        EXECUTE format('CREATE INDEX IF NOT EXISTS notification_subjects_trgm_idx ON notification_subjects '
            'USING gin (subject %I.gin_trgm_ops)', trgm_schema);
    EXCEPTION WHEN insufficient_privilege OR undefined_object OR invalid_schema_name THEN
        RAISE NOTICE 'outbox migration 0010: cannot use pg_trgm in schema %: %; the keyword search will scan',
            trgm_schema, SQLERRM;
    END;
    DROP INDEX notifications_subject_trgm_idx;
END
$$;

--bun:split

-- Statistics for the planner, which picks the keyword search's join by them.
ANALYZE notification_subjects;
