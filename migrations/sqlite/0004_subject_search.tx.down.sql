DROP TRIGGER IF EXISTS notifications_subject_update;

--bun:split

DROP TRIGGER IF EXISTS notifications_subject_delete;

--bun:split

DROP TABLE IF EXISTS notifications_subject_state;

--bun:split

DROP TABLE IF EXISTS notifications_subject;
