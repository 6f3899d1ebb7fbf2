-- The lists' keys move to a table of their own (PostgreSQL):
-- notification_keys holds each notification's id, creation time, list, type
-- and subject, columns that never change, with the indexes that order and
-- filter the lists by them (created, list, type, and the subjects'
-- trigrams). It replaces 0010's notification_subjects.
--
-- Why: a recorded outcome changes status, which indexes cover, so the
-- update is never HOT: PostgreSQL enters the new row version in every index
-- of notifications. An index on columns that never change gained nothing
-- from that entry and cost every delivery its B-tree insert. Here the
-- notifications keep the primary key, the indexes whose columns an outcome
-- does change (the claim's, status, delivered) and the site's, which the
-- operator's lists combine with a status most often (PostgreSQL intersects
-- two indexes of one table before it reads a row): a delivery writes four
-- index entries where it wrote seven. The lists ordered by creation time
-- alone, or filtered by list or type, read the keys' indexes and join the
-- notifications by id.
--
-- Triggers keep the table in step with notifications, as 0010's did:
-- statement triggers with transition tables copy the inserted rows (an
-- insert, the store's COPY, an insert that skips ids stored already) and
-- delete the deleted ones (the purge), TRUNCATE empties both, and a row
-- trigger follows an update of a key (none of the outbox's statements
-- writes one). Each names the table in the schema of the notifications that
-- fired it, whatever the writer's search path. They run with the writer's
-- rights, so the table gets the owner and the grants notifications has (a
-- role granted rights on notifications later needs them on
-- notification_keys too).
--
-- A view named notification_subjects (id, subject) takes the dropped
-- table's place, so that the nodes of the previous release keep their
-- keyword search during a rolling upgrade (their lists ordered by creation
-- time, list or type scan until they are upgraded: their indexes moved).
--
-- Each index moves only where it is: an installation whose DBA dropped one
-- keeps that choice (the trigram index, for instance, where pg_trgm is
-- missing). A DBA can add them later, in the outbox's schema:
--   CREATE INDEX notification_keys_created_idx ON notification_keys (created_at, id);
--   CREATE INDEX notification_keys_list_created_idx ON notification_keys (list, created_at, id);
--   CREATE INDEX notification_keys_type_created_idx ON notification_keys (type, created_at, id);
--   CREATE INDEX notification_keys_trgm_idx ON notification_keys USING gin (subject gin_trgm_ops);
--
-- The first statement takes the lock that holds every writer of
-- notifications off until the commit, so that the copy below misses no row
-- (first, so that a transaction of REPEATABLE READ takes its snapshot only
-- once the writers before it are done). Readers go on until the triggers
-- are swapped, which, like the drops after them, holds them off until the
-- commit (a moment: the copy, the index builds and the ANALYZE come
-- before). Writers wait for the whole migration: run `outbox migrate up`
-- before the rollout when the table is large.

LOCK TABLE notifications IN SHARE ROW EXCLUSIVE MODE;

--bun:split

CREATE TABLE IF NOT EXISTS notification_keys (
    id          uuid NOT NULL,
    created_at  timestamptz NOT NULL,
    list        text COLLATE "C" NOT NULL,
    type        text COLLATE "C" NOT NULL,
    subject     text NOT NULL,
    CONSTRAINT notification_keys_pkey PRIMARY KEY (id)
) WITH (
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

--bun:split

INSERT INTO notification_keys (id, created_at, list, type, subject)
    SELECT id, created_at, list, type, subject FROM notifications;

--bun:split

-- The B-tree indexes, built on the filled table, where the notifications
-- have them.
DO $$
DECLARE
    k record;
BEGIN
    FOR k IN SELECT * FROM (VALUES
            ('created', 'created_at, id'),
            ('list_created', 'list, created_at, id'),
            ('type_created', 'type, created_at, id')) AS v(name, cols)
    LOOP
        IF EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema()
                AND indexname = 'notifications_' || k.name || '_idx') THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON notification_keys (%s)',
                'notification_keys_' || k.name || '_idx', k.cols);
        ELSE
            RAISE NOTICE 'outbox migration 0011: no index notifications_%_idx, so none on notification_keys', k.name;
        END IF;
    END LOOP;
END
$$;

--bun:split

-- The trigram index, where 0010 made it. When pg_trgm's schema is closed to
-- this user now, the search scans, with a NOTICE.
DO $$
DECLARE
    trgm_schema text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema()
            AND indexname = 'notification_subjects_trgm_idx') THEN
        RAISE NOTICE 'outbox migration 0011: no trigram index on notification_subjects, so none on notification_keys; the keyword search scans';
        RETURN;
    END IF;
    SELECT n.nspname INTO STRICT trgm_schema
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_trgm';
    BEGIN
        EXECUTE format('CREATE INDEX IF NOT EXISTS notification_keys_trgm_idx ON notification_keys '
            'USING gin (subject %I.gin_trgm_ops)', trgm_schema);
    EXCEPTION WHEN insufficient_privilege OR undefined_object OR invalid_schema_name THEN
        RAISE NOTICE 'outbox migration 0011: cannot use pg_trgm in schema %: %; the keyword search will scan',
            trgm_schema, SQLERRM;
    END;
END
$$;

--bun:split

-- Statistics for the planner, which picks the lists' joins by them.
ANALYZE notification_keys;

--bun:split

CREATE OR REPLACE FUNCTION notification_keys_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I.notification_keys (id, created_at, list, type, subject) '
        'SELECT id, created_at, list, type, subject FROM inserted', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_keys_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.notification_keys AS k USING deleted AS d WHERE k.id = d.id',
        TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_keys_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('UPDATE %I.notification_keys SET id = $1, created_at = $2, list = $3, type = $4, '
        'subject = $5 WHERE id = $6', TG_TABLE_SCHEMA)
        USING NEW.id, NEW.created_at, NEW.list, NEW.type, NEW.subject, OLD.id;
    RETURN NULL;
END
$$;

--bun:split

CREATE OR REPLACE FUNCTION notification_keys_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('TRUNCATE %I.notification_keys', TG_TABLE_SCHEMA);
    RETURN NULL;
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

CREATE TRIGGER notification_keys_insert AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION notification_keys_insert();

--bun:split

CREATE TRIGGER notification_keys_delete AFTER DELETE ON notifications
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION notification_keys_delete();

--bun:split

CREATE TRIGGER notification_keys_update AFTER UPDATE OF id, created_at, list, type, subject ON notifications
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.created_at IS DISTINCT FROM NEW.created_at
        OR OLD.list IS DISTINCT FROM NEW.list OR OLD.type IS DISTINCT FROM NEW.type
        OR OLD.subject IS DISTINCT FROM NEW.subject)
    EXECUTE FUNCTION notification_keys_update();

--bun:split

CREATE TRIGGER notification_keys_truncate AFTER TRUNCATE ON notifications
    FOR EACH STATEMENT EXECUTE FUNCTION notification_keys_truncate();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_insert();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_delete();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_update();

--bun:split

DROP FUNCTION IF EXISTS notification_subjects_truncate();


--bun:split

-- Last, since each takes the lock that holds readers off until the commit
-- (so do the DROP TRIGGERs above).
DROP TABLE IF EXISTS notification_subjects;

--bun:split

-- For the nodes of the previous release, until they are upgraded: their
-- keyword search reads it (and their ANALYZE skips it with a warning).
CREATE VIEW notification_subjects AS SELECT id, subject FROM notification_keys;

--bun:split

-- The owner and the grants of notifications, on the keys' table and (to
-- read) on the view, for roles that write or read through them (the owner
-- may be another role than the migration's).
DO $$
DECLARE
    owner name := (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'notifications'::regclass);
    g record;
BEGIN
    EXECUTE format('ALTER TABLE notification_keys OWNER TO %I', owner);
    EXECUTE format('ALTER VIEW notification_subjects OWNER TO %I', owner);
    FOR g IN
        SELECT a.privilege_type, a.is_grantable,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee
        FROM pg_class c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS a
        LEFT JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.oid = 'notifications'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON notification_keys TO %s%s', g.privilege_type, g.grantee,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        IF g.privilege_type = 'SELECT' THEN
            EXECUTE format('GRANT SELECT ON notification_subjects TO %s%s', g.grantee,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END IF;
    END LOOP;
END
$$;

--bun:split

DROP INDEX IF EXISTS notifications_created_idx;

--bun:split

DROP INDEX IF EXISTS notifications_list_created_idx;

--bun:split

DROP INDEX IF EXISTS notifications_type_created_idx;
