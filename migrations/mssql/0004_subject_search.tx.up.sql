-- Keyword search in the subject (MS SQL): nothing to build. SQLite gets a
-- trigram index and PostgreSQL a pg_trgm index in their 0004; the full-text
-- search of SQL Server finds words and word prefixes, not the substrings
-- that Filter.Subject asks for, so a keyword search scans the table here
-- (adapters/sqlstore/DESIGN.md, "Keyword search"). This migration keeps the
-- versions of the three dialects in step; it only checks that 0001 ran.

IF OBJECT_ID(N'notifications', N'U') IS NULL
    THROW 50000, N'outbox migration 0004: the notifications table is missing', 1;
