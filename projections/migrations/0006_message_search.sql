-- The log is memory (docs/retrieval.md): messages are searched like facts and chunks.
-- * keyword: a generated tsvector + GIN on messages (the messages projector's COPY path names
--   its columns, so the generated one is computed on insert like any other);
-- * vector: one embedding per user/assistant message in a side table written by the
--   message-index projector (projections/message_index.py), with the scope columns the search
--   filters on, so a vector search never joins the log;
-- * surfaced_items remember the turn (seq) they were last shown at: an item is skipped only
--   while the model can still see it (retrieval.surfaced_window_seqs), not for ever; and the
--   turn before that (previous_seq), so a retry of a turn still knows what earlier turns showed.
-- {{EMBEDDING_DIMENSIONS}} is filled in by `memory-agent migrate` from the settings.

ALTER TABLE messages
    ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
CREATE INDEX messages_tsv ON messages USING gin (content_tsv);
CREATE INDEX messages_scope ON messages (tenant_id, user_id, subject_id);

CREATE TABLE message_embeddings (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    seq              integer     NOT NULL,
    user_id          text        NOT NULL,
    subject_id       text,
    occurred_at      timestamptz NOT NULL,
    embedding        vector({{EMBEDDING_DIMENSIONS}}) NOT NULL,
    embedding_model  text        NOT NULL,
    event_id         text        NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id, seq)
);
CREATE INDEX message_embeddings_scope ON message_embeddings (tenant_id, user_id, subject_id);
CREATE INDEX message_embeddings_embedding ON message_embeddings
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);

ALTER TABLE surfaced_items ADD COLUMN surfaced_seq integer, ADD COLUMN previous_seq integer;
