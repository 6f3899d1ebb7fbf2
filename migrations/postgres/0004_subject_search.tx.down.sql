-- The extension stays: other schemas of the database may use it.
DROP INDEX IF EXISTS notifications_subject_trgm_idx;
