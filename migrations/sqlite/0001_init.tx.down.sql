DROP TABLE IF EXISTS notification_audit;

--bun:split

DROP TABLE IF EXISTS notifications;
