-- Seed 000's rolling summaries with their version chain, plus the prompt version,
-- model and source events that made each row, and the seed's monitoring queries as views.

CREATE TABLE memory (
    tenant_id          text        NOT NULL,
    conversation_id    text        NOT NULL,
    memory_id          integer     NOT NULL,
    memory_text        text,
    start_sequence     integer     NOT NULL,
    end_sequence       integer     NOT NULL,
    base_memory_id     integer,
    status             text        NOT NULL DEFAULT 'processing'
                                   CHECK (status IN ('processing', 'completed', 'failed')),
    attempt            integer     NOT NULL DEFAULT 1,
    error              text,
    prompt_version     text        NOT NULL,
    model              text        NOT NULL,
    generation_time_ms integer,
    source_event_ids   text[]      NOT NULL DEFAULT '{}',
    request_event_id   text        NOT NULL,
    result_event_id    text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    completed_at       timestamptz,
    PRIMARY KEY (tenant_id, conversation_id, memory_id),
    FOREIGN KEY (tenant_id, conversation_id, base_memory_id)
        REFERENCES memory (tenant_id, conversation_id, memory_id),
    CHECK (start_sequence <= end_sequence)
);

-- Most recent COMPLETED memory of a conversation (seed 000's index).
CREATE INDEX memory_conversation_status ON memory (tenant_id, conversation_id, status, end_sequence DESC);
-- Redelivery or replay can never produce two completed summaries of one window.
CREATE UNIQUE INDEX memory_one_completed_per_window
    ON memory (tenant_id, conversation_id, start_sequence, end_sequence, prompt_version)
    WHERE status = 'completed';

CREATE VIEW memory_version_chain AS
SELECT m.tenant_id, m.conversation_id, m.memory_id, m.start_sequence, m.end_sequence, m.base_memory_id,
       b.end_sequence AS base_end_seq, m.status, m.attempt, m.prompt_version, m.model,
       m.generation_time_ms, m.created_at, m.completed_at
FROM memory m
LEFT JOIN memory b
       ON b.tenant_id = m.tenant_id AND b.conversation_id = m.conversation_id AND b.memory_id = m.base_memory_id;

CREATE VIEW memory_stuck_processing AS
SELECT tenant_id, conversation_id, memory_id, attempt, created_at, updated_at, now() - updated_at AS age
FROM memory
WHERE status = 'processing' AND updated_at < now() - interval '5 minutes';

CREATE VIEW memory_window_progression AS
SELECT tenant_id, conversation_id, memory_id, start_sequence, end_sequence,
       end_sequence - start_sequence + 1 AS window_size, generation_time_ms, completed_at
FROM memory
WHERE status = 'completed';

CREATE VIEW memory_generation_stats AS
SELECT avg(generation_time_ms) FILTER (WHERE status = 'completed')::float8 AS avg_ms,
       max(generation_time_ms) FILTER (WHERE status = 'completed') AS max_ms,
       count(*) FILTER (WHERE status = 'completed') AS total_summaries,
       count(*) FILTER (WHERE status = 'failed') AS failed_summaries,
       count(*) FILTER (WHERE status = 'processing') AS in_flight_summaries
FROM memory;
