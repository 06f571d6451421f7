-- Topic memory (seed 004): topics with their summary and decay fields, the active messages
-- of each topic, and the compressed archive of the older ones. Every row comes from topic
-- events (schemas/topic_events.py); applying an event twice changes nothing.
-- Half-life, memory type and priority are not stored: they follow from access_count,
-- importance and the times, with the settings' decay parameters (projections/topic_queries.py).

-- Per conversation: which topic is active and how far the topic fold has got.
CREATE TABLE topic_conversations (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    active_topic_id  text,
    activated_seq    integer,               -- the message that activated it
    last_seq         integer     NOT NULL DEFAULT -1,  -- newest message placed in a topic
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id)
);

CREATE TABLE topics (
    tenant_id              text             NOT NULL,
    conversation_id        text             NOT NULL,
    topic_id               text             NOT NULL,
    title                  text             NOT NULL,
    first_seq              integer          NOT NULL,
    summary                text,
    summary_upto_seq       integer          NOT NULL DEFAULT -1,  -- summary and archive cover seq <= this
    summary_model          text,
    summary_prompt_version text,
    importance             double precision NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    access_count           integer          NOT NULL DEFAULT 0,
    message_count          integer          NOT NULL DEFAULT 0,   -- every message ever assigned
    snapshot_seq           integer          NOT NULL DEFAULT -1,  -- the message the decay fields are from
    created_at             timestamptz      NOT NULL,             -- event time of the first message
    last_active_at         timestamptz      NOT NULL,             -- the LRU timer
    active                 boolean          NOT NULL DEFAULT false,
    -- Set when the topic came back with an archive: its archived messages are in the
    -- turn-start context until it is deactivated, or compacted by a request made after the
    -- restore (docs/topics.md). restore_cleared_seq keeps a replayed restore from coming back.
    restored_at_seq        integer,
    restore_cleared_seq    integer          NOT NULL DEFAULT -1,
    compaction_status      text CHECK (compaction_status IN ('requested', 'completed', 'failed')),
    compaction_attempt     integer,
    compaction_error       text,
    compactions            integer          NOT NULL DEFAULT 0,
    evicted_at             timestamptz,                           -- left the working set
    evicted_priority       double precision,
    evicted_reason         text CHECK (evicted_reason IN ('decayed', 'capacity')),
    created_event_id       text,
    updated_at             timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id, topic_id)
);
CREATE INDEX topics_working_set ON topics (tenant_id, conversation_id) WHERE evicted_at IS NULL;

-- The active (not yet archived) messages of each topic; a message belongs to one topic.
CREATE TABLE topic_messages (
    tenant_id        text             NOT NULL,
    conversation_id  text             NOT NULL,
    seq              integer          NOT NULL,
    topic_id         text             NOT NULL,
    role             text             NOT NULL CHECK (role IN ('user', 'assistant')),
    content          text             NOT NULL,
    occurred_at      timestamptz      NOT NULL,
    similarity       double precision,          -- cosine to the topic it joined, if matched
    matched          boolean          NOT NULL DEFAULT true,
    event_id         text             NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id, seq),
    FOREIGN KEY (tenant_id, conversation_id, topic_id) REFERENCES topics (tenant_id, conversation_id, topic_id)
);
CREATE INDEX topic_messages_topic ON topic_messages (tenant_id, conversation_id, topic_id, seq);

-- The archive: gzip bytes of a JSON list [{seq, role, content, timestamp}] in seq order
-- (seed 004's format without its final base64 step: bytea needs no text encoding).
CREATE TABLE topic_archives (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    topic_id         text        NOT NULL,
    archive          bytea       NOT NULL,
    message_count    integer     NOT NULL,
    first_seq        integer     NOT NULL,
    last_seq         integer     NOT NULL,
    json_bytes       integer     NOT NULL,   -- size before gzip, for the compression ratio
    gzip_bytes       integer     NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id, topic_id),
    FOREIGN KEY (tenant_id, conversation_id, topic_id) REFERENCES topics (tenant_id, conversation_id, topic_id)
);

-- Messages the fold could not place (a reply before any topic, a late seq): named, not lost.
CREATE TABLE topic_unassigned (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    seq              integer     NOT NULL,
    reason           text        NOT NULL,
    event_id         text        NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id, seq)
);

CREATE VIEW topic_compression AS
SELECT tenant_id, conversation_id, topic_id, message_count, json_bytes, gzip_bytes,
       1 - gzip_bytes::float8 / NULLIF(json_bytes, 0) AS size_reduction
FROM topic_archives;
