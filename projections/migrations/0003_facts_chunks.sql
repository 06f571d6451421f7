-- Long-term memory (seeds 001, 003): conversation chunks and facts with embeddings
-- (pgvector HNSW + full-text), links and validity instead of destructive updates,
-- the owners' management decisions, and what was already surfaced per conversation.
-- {{EMBEDDING_DIMENSIONS}} is filled in by `memory-agent migrate` from the settings.

CREATE TABLE conversation_chunks (
    chunk_id            text        PRIMARY KEY,
    tenant_id           text        NOT NULL,
    conversation_id     text        NOT NULL,
    user_id             text        NOT NULL,
    subject_id          text,
    content             text        NOT NULL,
    embedding           vector({{EMBEDDING_DIMENSIONS}}) NOT NULL,
    embedding_model     text        NOT NULL,
    message_range_start integer     NOT NULL,
    message_range_end   integer     NOT NULL,  -- exclusive
    prompt_version      text        NOT NULL,
    model               text        NOT NULL,
    source_event_ids    text[]      NOT NULL DEFAULT '{}',
    event_id            text        NOT NULL,
    content_tsv         tsvector    GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, conversation_id, message_range_start, message_range_end)
);
CREATE INDEX conversation_chunks_scope ON conversation_chunks (tenant_id, user_id, subject_id);
CREATE INDEX conversation_chunks_embedding ON conversation_chunks
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX conversation_chunks_tsv ON conversation_chunks USING gin (content_tsv);

CREATE TABLE facts (
    fact_id                text        PRIMARY KEY,
    tenant_id              text        NOT NULL,
    owner_user_id          text        NOT NULL,
    subject_id             text,
    category               text        NOT NULL,
    memory_type            text        NOT NULL DEFAULT 'fact',
    content                text        NOT NULL,
    importance             smallint    NOT NULL DEFAULT 3 CHECK (importance BETWEEN 1 AND 5),
    tags                   text[]      NOT NULL DEFAULT '{}',
    visibility             text        NOT NULL DEFAULT 'private' CHECK (visibility IN ('private', 'shared')),
    source_conversation_id text,
    source_chunk_id        text,
    source_event_ids       text[]      NOT NULL DEFAULT '{}',
    embedding              vector({{EMBEDDING_DIMENSIONS}}) NOT NULL,
    embedding_model        text        NOT NULL,
    extracted_by           text        NOT NULL,
    prompt_version         text        NOT NULL,
    access_count           integer     NOT NULL DEFAULT 0,
    last_accessed_at       timestamptz,
    valid_from             timestamptz NOT NULL DEFAULT now(),
    valid_to               timestamptz,          -- set when superseded; history is kept
    deleted_at             timestamptz,          -- set when the owner deletes it
    event_id               text        NOT NULL,
    content_tsv            tsvector    GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX facts_owner_scope ON facts (tenant_id, owner_user_id, subject_id);
CREATE INDEX facts_shared_scope ON facts (tenant_id, subject_id, visibility);
CREATE INDEX facts_embedding ON facts USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX facts_tsv ON facts USING gin (content_tsv);

CREATE TABLE fact_links (
    from_fact_id text        NOT NULL REFERENCES facts (fact_id),
    to_fact_id   text        NOT NULL REFERENCES facts (fact_id),
    relationship text        NOT NULL CHECK (relationship IN ('related', 'supersedes', 'contradicts', 'elaborates')),
    event_id     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_fact_id, to_fact_id, relationship)
);

-- Every change to a fact (extracted, merged, superseded, edited, shared, deleted), for audit.
CREATE TABLE fact_history (
    id          bigserial   PRIMARY KEY,
    fact_id     text        NOT NULL,
    change      text        NOT NULL,
    old_content text,
    new_content text,
    detail      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    event_id    text        NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (fact_id, change, event_id)
);

-- The owners' decisions (from management events in the log), so that a fact extracted
-- again in a replay gets the same decision (matched by id, or by meaning: see docs).
CREATE TABLE fact_decisions (
    event_id         text        PRIMARY KEY,
    tenant_id        text        NOT NULL,
    owner_user_id    text        NOT NULL,
    subject_id       text,
    fact_id          text        NOT NULL,
    action           text        NOT NULL CHECK (action IN ('edited', 'shared', 'unshared', 'deleted')),
    content_snapshot text        NOT NULL,
    new_content      text,
    decided_at       timestamptz NOT NULL
);
CREATE INDEX fact_decisions_scope ON fact_decisions (tenant_id, owner_user_id, subject_id);

-- Items already put into a conversation's context (seed 001: skip what was surfaced).
CREATE TABLE surfaced_items (
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    item_kind       text        NOT NULL,
    item_id         text        NOT NULL,
    surfaced_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id, item_kind, item_id)
);
