-- Nothing to undo: 0008 builds nothing on MS SQL.

IF OBJECT_ID(N'site_calls', N'U') IS NULL
    THROW 50000, N'outbox migration 0008: the site_calls table is missing', 1;
