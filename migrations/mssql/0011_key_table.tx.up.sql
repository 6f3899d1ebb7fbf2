-- Keys the lists filter and order by (creation time, list, type, subject)
-- move to a table of their own on PostgreSQL (its 0011), so that a recorded
-- outcome, which PostgreSQL writes into every index of a row, does not
-- enter their indexes again. MS SQL updates only the indexes whose columns
-- change: nothing changes here. This migration keeps the versions of the
-- three dialects in step; it only checks that 0001 ran.

IF OBJECT_ID(N'notifications', N'U') IS NULL
    THROW 50000, N'outbox migration 0011: the notifications table is missing', 1;
