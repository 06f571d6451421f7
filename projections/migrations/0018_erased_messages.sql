-- Messages the messages projector reaches after their erasure was applied (docs/lineage.md,
-- "Messages reached after the erasure"). The erasure projector now records where its event is
-- on the log, so the messages projector can tell a message written before the erasure (not
-- projected) from one the user wrote after it (projected).
ALTER TABLE erasures
    ADD COLUMN log_partition integer,      -- the erasure event's record (NULL: applied before 0018)
    ADD COLUMN log_offset    bigint,
    ADD COLUMN logged_at     timestamptz;  -- its Kafka timestamp
CREATE INDEX erasures_user ON erasures (tenant_id, erased_user_id);
CREATE INDEX erasures_conversations ON erasures USING gin (conversation_ids);

-- One row per message not projected because an applied erasure covers it (ids only, no
-- content): the stages that read a range of messages count these seqs as gaps, not as messages
-- still to be projected.
CREATE TABLE erased_messages (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    seq              integer     NOT NULL,
    event_id         text        NOT NULL,
    erasure_event_id text        NOT NULL,
    dropped_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, conversation_id, seq)
);
