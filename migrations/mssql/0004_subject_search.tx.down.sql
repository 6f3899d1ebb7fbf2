-- Nothing to undo: 0004 builds nothing on MS SQL.

IF OBJECT_ID(N'notifications', N'U') IS NULL
    THROW 50000, N'outbox migration 0004: the notifications table is missing', 1;
