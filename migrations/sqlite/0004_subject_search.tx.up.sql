-- Keyword search in the subject (SQLite): Filter.Subject is a
-- substring match ignoring ASCII case (LIKE '%...%'), which no B-tree index
-- serves. An FTS5 index of the subjects' trigrams finds the rows that may
-- hold a keyword of three characters or more; the store reads only those
-- rows and keeps the LIKE on them, so the index never decides a match on its
-- own (adapters/sqlstore/DESIGN.md, "Keyword search").
--
-- External content: the index stores the trigrams and rowids, not the
-- subjects. detail=none keeps no positions (a keyword's trigrams are ANDed,
-- and LIKE checks their order), columnsize=0 no lengths: the smallest index
-- and the cheapest write. The trigram tokenizer folds case, so that one
-- entry serves every case of a keyword.
--
-- The index runs behind the table: it holds the rows up to the rowid in
-- notifications_subject_state, and the store indexes the rows above it in
-- the background, a batch every quarter of a second while rows arrive
-- (FTS5 pays for each statement that writes to it, so indexing in every
-- insert would cost ingest far more). A keyword search reads the rows above
-- the mark itself. New rows get rowids above any row's, so above the mark:
-- the delete trigger lowers the mark when the rows at the top go, so that
-- their rowids, which SQLite then gives out again, are never below it.
-- Subjects never change; rows leave by Purge, which the trigger follows.

CREATE VIRTUAL TABLE IF NOT EXISTS notifications_subject USING fts5(
    subject,
    content = 'notifications', content_rowid = 'rowid',
    tokenize = 'trigram', detail = 'none', columnsize = 0
);

--bun:split

-- One row: every notification whose rowid is at most "indexed" is in the
-- index, and none above it.
CREATE TABLE IF NOT EXISTS notifications_subject_state (
    id      INTEGER PRIMARY KEY CHECK (id = 0),
    indexed INTEGER NOT NULL
);

--bun:split

-- The rows that exist already (2.5 s per million rows).
INSERT INTO notifications_subject (notifications_subject) VALUES ('rebuild');

--bun:split

INSERT INTO notifications_subject_state (id, indexed)
    SELECT 0, coalesce(max(rowid), 0) FROM notifications;

--bun:split

CREATE TRIGGER IF NOT EXISTS notifications_subject_delete AFTER DELETE ON notifications BEGIN
    INSERT INTO notifications_subject (notifications_subject, rowid, subject)
        SELECT 'delete', old.rowid, old.subject FROM notifications_subject_state
        WHERE old.rowid <= indexed;
    UPDATE notifications_subject_state SET indexed = (SELECT coalesce(max(rowid), 0) FROM notifications)
        WHERE indexed > (SELECT coalesce(max(rowid), 0) FROM notifications);
END;

--bun:split

-- The store never changes a subject; should anything else do so, the index
-- follows (a row above the mark is indexed with its new subject in time).
CREATE TRIGGER IF NOT EXISTS notifications_subject_update AFTER UPDATE OF subject ON notifications BEGIN
    INSERT INTO notifications_subject (notifications_subject, rowid, subject)
        SELECT 'delete', old.rowid, old.subject FROM notifications_subject_state
        WHERE old.rowid <= indexed;
    INSERT INTO notifications_subject (rowid, subject)
        SELECT new.rowid, new.subject FROM notifications_subject_state
        WHERE new.rowid <= indexed;
END;
