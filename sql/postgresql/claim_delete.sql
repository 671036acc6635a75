-- Clear a claim once its staged files are committed to the Delta log (or found committed there).
DELETE FROM {table} WHERE app_id = :app_id AND version = :version;
