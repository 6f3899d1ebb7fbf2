-- Keyword search in central's mirror of the sites' cached calls (SQLite):
-- SiteCallFilter.Keyword is a substring match ignoring ASCII case in the
-- id, target, method, last error, source instance and source script, which
-- no B-tree index serves. An FTS5 index of the trigrams of those texts,
-- joined by spaces, finds the rows that may hold a keyword of three
-- characters or more; the store keeps the columns' LIKE on them, so the
-- index never decides a match on its own (adapters/sqlstore/DESIGN.md,
-- "Keyword search").
--
-- Contentless: the index stores the trigrams and rowids, not the texts.
-- detail=none keeps no positions, columnsize=0 no lengths. Unlike the
-- notifications' subjects, a mirror row changes (its last error): triggers
-- keep the index in step within the report's own statement, and an update
-- that leaves the texts as they were (most do: only the status and the
-- times move) does not touch it.

CREATE VIRTUAL TABLE IF NOT EXISTS site_calls_search USING fts5(
    text,
    content = '', tokenize = 'trigram', detail = 'none', columnsize = 0
);

--bun:split

INSERT INTO site_calls_search (rowid, text)
    SELECT rowid, id || ' ' || target || ' ' || method || ' ' || last_error || ' ' || source_instance || ' ' || source_script
    FROM site_calls;

--bun:split

CREATE TRIGGER IF NOT EXISTS site_calls_search_insert AFTER INSERT ON site_calls BEGIN
    INSERT INTO site_calls_search (rowid, text) VALUES (new.rowid,
        new.id || ' ' || new.target || ' ' || new.method || ' ' || new.last_error || ' ' || new.source_instance || ' ' || new.source_script);
END;

--bun:split

CREATE TRIGGER IF NOT EXISTS site_calls_search_update AFTER UPDATE ON site_calls
    WHEN old.id IS NOT new.id OR old.target IS NOT new.target OR old.method IS NOT new.method
        OR old.last_error IS NOT new.last_error OR old.source_instance IS NOT new.source_instance
        OR old.source_script IS NOT new.source_script OR old.rowid IS NOT new.rowid BEGIN
    INSERT INTO site_calls_search (site_calls_search, rowid, text) VALUES ('delete', old.rowid,
        old.id || ' ' || old.target || ' ' || old.method || ' ' || old.last_error || ' ' || old.source_instance || ' ' || old.source_script);
    INSERT INTO site_calls_search (rowid, text) VALUES (new.rowid,
        new.id || ' ' || new.target || ' ' || new.method || ' ' || new.last_error || ' ' || new.source_instance || ' ' || new.source_script);
END;

--bun:split

CREATE TRIGGER IF NOT EXISTS site_calls_search_delete AFTER DELETE ON site_calls BEGIN
    INSERT INTO site_calls_search (site_calls_search, rowid, text) VALUES ('delete', old.rowid,
        old.id || ' ' || old.target || ' ' || old.method || ' ' || old.last_error || ' ' || old.source_instance || ' ' || old.source_script);
END;
