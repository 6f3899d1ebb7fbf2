DROP TABLE IF EXISTS notification_channels;

--bun:split

DROP TABLE IF EXISTS notification_lists;
