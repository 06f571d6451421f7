-- Erasure on disk (docs/security.md, "Erasure on disk"): per applied erasure, the tables it
-- deleted rows from, schema-qualified. The scrub (projections/scrub.py) rewrites each table
-- (VACUUM FULL: the pages that held the deleted rows, their TOAST and their indexes are written
-- anew without them) and retires the write-ahead log written before (pg_switch_wal, CHECKPOINT),
-- then stamps `scrubbed_at`. Ids and table names only.
CREATE TABLE erasure_scrubs (
    erasure_event_id text        NOT NULL,
    table_name       text        NOT NULL,
    requested_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    scrubbed_at      timestamptz,
    PRIMARY KEY (erasure_event_id, table_name)
);
CREATE INDEX erasure_scrubs_pending ON erasure_scrubs (requested_at) WHERE scrubbed_at IS NULL;
