-- Keyword search in the mirror at central of the cached calls of the
-- sites (PostgreSQL): nothing to build; the pg_trgm index of 0007 serves it. SQLite
-- gets an FTS5 trigram index in its 0008. This migration keeps the
-- versions of the three dialects in step.

SELECT 1;
