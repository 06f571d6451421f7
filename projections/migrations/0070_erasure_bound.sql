-- Where an erasure's scope ends on the log (docs/lineage.md, "The erasure's own consumer"): per
-- partition of the conversation topic, the first offset it does not erase. The erasure projector
-- has a consumer of its own, so the messages projector may have projected messages written after
-- the erasure by the time it is applied; the erasure deletes only messages before this bound, and
-- the messages projector leaves out only those (projections/erased_messages.py). NULL: an erasure
-- applied before 0070 (the Kafka timestamps decide, as before).
ALTER TABLE erasures ADD COLUMN log_bound jsonb;  -- {"<partition>": first offset after, ...}
