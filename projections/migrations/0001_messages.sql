-- The projected conversation log, per-conversation bookkeeping, projector offsets
-- and the anomalies (duplicates, seq conflicts, gaps) the projector observed.

CREATE TABLE conversations (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    user_id          text        NOT NULL,
    subject_id       text,
    last_seq         integer     NOT NULL,
    message_count    integer     NOT NULL DEFAULT 0,
    gap_count        integer     NOT NULL DEFAULT 0,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_id)
);

CREATE TABLE messages (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    seq              integer     NOT NULL CHECK (seq >= 0),
    event_id         text        NOT NULL,
    user_id          text        NOT NULL,
    subject_id       text,
    role             text        NOT NULL,
    content          text        NOT NULL,
    metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    occurred_at      timestamptz NOT NULL,
    projected_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id, seq)
);
CREATE UNIQUE INDEX messages_event_id ON messages (tenant_id, event_id);

-- Next offset to read per (projector, topic, partition), written in the same
-- transaction as the rows it covers: a restart resumes exactly there.
CREATE TABLE projector_offsets (
    projector   text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projector, topic, partition)
);

CREATE TABLE projection_anomalies (
    id               bigserial   PRIMARY KEY,
    projector        text        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('duplicate', 'seq_conflict', 'gap', 'invalid')),
    tenant_id        text,
    conversation_id  text,
    seq              integer,
    detail           text        NOT NULL,
    source_partition integer     NOT NULL,
    source_offset    bigint      NOT NULL,
    observed_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (projector, kind, source_partition, source_offset)
);
CREATE INDEX projection_anomalies_conversation ON projection_anomalies (tenant_id, conversation_id);
