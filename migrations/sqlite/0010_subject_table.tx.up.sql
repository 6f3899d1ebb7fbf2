-- Keyword search reads a table of its own on PostgreSQL (its 0010), so that
-- a recorded outcome does not enter the trigrams of a subject in its index
-- again.
-- SQLite's trigram index is a table of its own already (0004), which an
-- outcome does not touch: nothing changes here. This migration keeps the
-- versions of the three dialects in step; it only checks that 0001 ran.

SELECT 1 FROM notifications LIMIT 0;
