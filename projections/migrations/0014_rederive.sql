-- Re-derivation after an erasure (docs/lineage.md, "Mixed rows"): one row per conversation of
-- another owner that an erased user wrote in. The erasure projector writes it in the erasure's
-- transaction (ids and seqs only, no content); the worker's re-derive sender
-- (streams/rederive.py) asks the window fold for the summaries again and the chunk stage for
-- the deleted chunk ranges, from the messages that remain, until every range is recorded again.
CREATE TABLE erasure_rederive (
    erasure_event_id text        NOT NULL,
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    erased_seqs      integer[]   NOT NULL,       -- the erased user's messages: gaps, not waits
    base_memory_id   integer,                    -- the newest summary kept (ends before them)
    base_end_seq     integer,
    chunk_ranges     jsonb       NOT NULL DEFAULT '[]'::jsonb,  -- [[start, end_exclusive], ...] deleted
    attempts         integer     NOT NULL DEFAULT 0,
    sent_at          timestamptz,                -- last time requests were sent
    done_at          timestamptz,                -- every chunk range recorded again (or given up)
    outcome          text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (erasure_event_id, conversation_id)
);
CREATE INDEX erasure_rederive_pending ON erasure_rederive (created_at) WHERE done_at IS NULL;
CREATE INDEX erasure_rederive_conversation ON erasure_rederive (tenant_id, conversation_id);
