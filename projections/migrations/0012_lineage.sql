-- Lineage (docs/lineage.md): what every derived row came from, and what the API served.
-- Summaries, chunks and facts already carry their source events, ranges, prompt version and
-- model. Topics did not keep theirs: the active-message table forgets a message once it is
-- archived, and the summary/archive rows are overwritten by each compaction. These tables keep
-- that history, filled from the topic events by the lineage projector (projections/lineage.py);
-- `projected_at` is when this read model learned it (the "as of" of a reconstruction).

-- Every message ever placed in a topic (never deleted by a compaction).
CREATE TABLE topic_assignments (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    seq              integer     NOT NULL,
    topic_id         text        NOT NULL,
    matched          boolean     NOT NULL,
    similarity       double precision,
    event_id         text        NOT NULL,   -- the topic.message.assigned event
    projected_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, conversation_id, seq)
);
CREATE INDEX topic_assignments_topic ON topic_assignments (tenant_id, conversation_id, topic_id, seq);

-- Which topic became active at which message.
CREATE TABLE topic_activations (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    seq              integer     NOT NULL,
    topic_id         text        NOT NULL,
    event_id         text        NOT NULL,
    projected_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, conversation_id, seq)
);

-- Every version of a topic's summary and what it moved to the archive, with prompt and model.
CREATE TABLE topic_compactions (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    topic_id         text        NOT NULL,
    upto_seq         integer     NOT NULL,
    archived_seqs    integer[]   NOT NULL,
    summary          text        NOT NULL,
    prompt_version   text        NOT NULL,
    model            text        NOT NULL,
    generation_time_ms integer   NOT NULL,
    event_id         text        NOT NULL,
    projected_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, conversation_id, topic_id, upto_seq)
);

-- Each context the API served (context.served events).
CREATE TABLE served_contexts (
    event_id         text        PRIMARY KEY,
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    user_id          text        NOT NULL,   -- the acting user
    subject_id       text,
    turn_seq         integer     NOT NULL,
    served_at        timestamptz NOT NULL,
    summary_memory_id integer,
    gap_from_seq     integer,
    gap_to_seq       integer,
    active_topic_id  text,
    payload          jsonb       NOT NULL,   -- the whole event payload
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    projected_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX served_contexts_turn ON served_contexts (tenant_id, conversation_id, turn_seq, served_at DESC);
-- Which served contexts included an item (the forward walk from a fact, chunk or message).
CREATE INDEX served_contexts_items ON served_contexts USING gin ((payload -> 'retrieved') jsonb_path_ops);

-- Forward walks from a message: facts by source event, chunks and summaries by range.
CREATE INDEX facts_source_events ON facts USING gin (source_event_ids);
CREATE INDEX conversation_chunks_conversation ON conversation_chunks (tenant_id, conversation_id, message_range_start);
