DROP TABLE IF EXISTS site_health;

--bun:split

DROP TABLE IF EXISTS site_cursors;

--bun:split

DROP TABLE IF EXISTS site_commands;

--bun:split

DROP TABLE IF EXISTS site_calls;
