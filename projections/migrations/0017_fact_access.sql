-- How often retrieval showed a fact (docs/retrieval.md, "Record"): in a narrow table of its own.
-- A bump used to rewrite the whole facts row (~1.9 kB with its vector, four to a page, so
-- rarely a HOT update): each one inserted into the facts' HNSW, GIN and btree indexes too.
-- Operational, like surfaced_items: not derived from the log, not rebuilt by a replay.
CREATE TABLE fact_access (
    fact_id          text        PRIMARY KEY REFERENCES facts (fact_id) ON DELETE CASCADE,
    tenant_id        text        NOT NULL,
    access_count     integer     NOT NULL DEFAULT 0,
    last_accessed_at timestamptz
);

INSERT INTO fact_access (fact_id, tenant_id, access_count, last_accessed_at)
SELECT fact_id, tenant_id, access_count, last_accessed_at FROM facts
 WHERE access_count > 0 OR last_accessed_at IS NOT NULL;

ALTER TABLE facts DROP COLUMN access_count, DROP COLUMN last_accessed_at;
