-- Nothing to undo (see the up migration).

SELECT 1 FROM notifications LIMIT 0;
