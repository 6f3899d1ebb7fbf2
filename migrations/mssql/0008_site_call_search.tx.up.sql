-- Keyword search in the mirror at central of the cached calls of the sites (MS SQL):
-- nothing to build; as for the subjects (0004), a keyword search scans.
-- SQLite gets an FTS5 trigram index in its 0008. This migration keeps the
-- versions of the three dialects in step; it only checks that 0007 ran.

IF OBJECT_ID(N'site_calls', N'U') IS NULL
    THROW 50000, N'outbox migration 0008: the site_calls table is missing', 1;
