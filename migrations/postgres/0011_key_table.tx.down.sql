-- The three B-tree indexes go back onto notifications where this migration had
-- moved them, and notification_keys becomes 0010's notification_subjects
-- again (its trigram index kept), with 0010's triggers. Writers of
-- notifications wait for the index builds. The dropped columns keep their
-- space in the table until it is rewritten (VACUUM FULL).

LOCK TABLE notifications IN SHARE ROW EXCLUSIVE MODE;

--bun:split

DROP VIEW IF EXISTS notification_subjects;

--bun:split

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
                AND indexname = 'notification_keys_' || k.name || '_idx') THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON notifications (%s)',
                'notifications_' || k.name || '_idx', k.cols);
        END IF;
    END LOOP;
END
$$;

--bun:split

DROP TRIGGER IF EXISTS notification_keys_insert ON notifications;

--bun:split

DROP TRIGGER IF EXISTS notification_keys_delete ON notifications;

--bun:split

DROP TRIGGER IF EXISTS notification_keys_update ON notifications;

--bun:split

DROP TRIGGER IF EXISTS notification_keys_truncate ON notifications;

--bun:split

DROP FUNCTION IF EXISTS notification_keys_insert();

--bun:split

DROP FUNCTION IF EXISTS notification_keys_delete();

--bun:split

DROP FUNCTION IF EXISTS notification_keys_update();

--bun:split

DROP FUNCTION IF EXISTS notification_keys_truncate();

--bun:split

-- Dropping the columns drops their indexes; the trigram index stays.
ALTER TABLE notification_keys DROP COLUMN created_at, DROP COLUMN list, DROP COLUMN type;

--bun:split

ALTER TABLE notification_keys RENAME TO notification_subjects;

--bun:split

ALTER TABLE notification_subjects RENAME CONSTRAINT notification_keys_pkey TO notification_subjects_pkey;

--bun:split

ALTER INDEX IF EXISTS notification_keys_trgm_idx RENAME TO notification_subjects_trgm_idx;

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
