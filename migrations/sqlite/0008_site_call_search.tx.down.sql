DROP TRIGGER IF EXISTS site_calls_search_delete;

--bun:split

DROP TRIGGER IF EXISTS site_calls_search_update;

--bun:split

DROP TRIGGER IF EXISTS site_calls_search_insert;

--bun:split

DROP TABLE IF EXISTS site_calls_search;
