-- Erasure (docs/lineage.md): one row per applied user.erased / conversation.erased event.
-- It holds ids only (no content): what was erased, how many rows went, and the message ranges
-- of other users' conversations whose derived rows (summaries, chunks, topics) were deleted
-- because they mixed the erased user's words with others' and await re-derivation.
CREATE TABLE erasures (
    event_id         text        PRIMARY KEY,
    tenant_id        text        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('user', 'conversation')),
    erased_user_id   text,
    conversation_ids text[]      NOT NULL DEFAULT '{}',
    deleted_rows     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    rederive         jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- {conversation: [erased seqs]}
    requested_by     text        NOT NULL,
    requested_at     timestamptz NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
