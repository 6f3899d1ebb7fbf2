-- Nothing to undo (see the up migration).

IF OBJECT_ID(N'notifications', N'U') IS NULL
    THROW 50000, N'outbox migration 0011: the notifications table is missing', 1;
