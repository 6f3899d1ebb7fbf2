-- Keyword search reads a table of its own on PostgreSQL (its 0010), so that
-- a recorded outcome does not enter the trigrams of a subject in its index
-- again.
-- MS SQL has no such index (a keyword search scans, see 0004): nothing
-- changes here. This migration keeps the versions of the three dialects in
-- step; it only checks that 0001 ran.

IF OBJECT_ID(N'notifications', N'U') IS NULL
    THROW 50000, N'outbox migration 0010: the notifications table is missing', 1;
