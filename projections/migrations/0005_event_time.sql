-- When the source of a chunk happened (event time of its first and last message), so that
-- retrieval ages chunks from event time like facts, and every packed line can show a date.
-- Nullable: rows projected before this migration have none (readers fall back to created_at).

ALTER TABLE conversation_chunks
    ADD COLUMN occurred_start timestamptz,
    ADD COLUMN occurred_end   timestamptz;
