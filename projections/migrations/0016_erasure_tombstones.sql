-- Tombstones of applied erasures (docs/lineage.md, "Derived events in flight"): a derived event
-- of an erased conversation (a summary, chunk, topic event or served record requested before
-- the erasure and projected after it) must not bring a row back. The erasure projector writes
-- one row per erased or mixed conversation in the erasure's transaction (ids and seqs only);
-- `drop_erased` drops, on insert, every derived row that a tombstone covers, whichever
-- projector (or batch replay) writes it. Its triggers are created by the erasure projector
-- with the generation's first erasure (projections/erasure.py): until then they cost nothing.
CREATE TABLE erasure_tombstones (
    tenant_id        text        NOT NULL,
    conversation_id  text        NOT NULL,
    erasure_event_id text        NOT NULL,
    whole            boolean     NOT NULL,          -- the conversation is erased whole
    through_seq      integer     NOT NULL,          -- whole: its last seq known when erased
    event_ids        text[]      NOT NULL DEFAULT '{}',  -- mixed: the erased messages' event ids
    erased_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, conversation_id, erasure_event_id)
);

-- A derived row of (tenant, conversation) about message `seq` (NULL: about the whole
-- conversation), made from the messages `sources` (NULL: not known), is erased when its
-- conversation was erased whole (up to the seq known then; a row without a seq while the
-- conversation has no newer messages), or when it was made from an erased message.
CREATE FUNCTION erased_row(tenant text, conversation text, seq integer, sources text[]) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT EXISTS (
        SELECT 1 FROM erasure_tombstones t
         WHERE t.tenant_id = tenant AND t.conversation_id = conversation
           AND ((t.whole AND seq IS NOT NULL AND seq <= t.through_seq)
             OR (t.whole AND seq IS NULL AND NOT EXISTS (
                    SELECT 1 FROM conversations c WHERE c.tenant_id = tenant AND c.conversation_id = conversation
                       AND c.last_seq > t.through_seq))
             OR (sources IS NOT NULL AND sources && t.event_ids)))
$$;

CREATE FUNCTION drop_erased() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    row_json jsonb;
    seq integer;
    sources text[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM erasure_tombstones t WHERE t.tenant_id = NEW.tenant_id
                                                       AND t.conversation_id = NEW.conversation_id) THEN
        RETURN NEW;  -- the usual case: one index probe
    END IF;
    row_json := to_jsonb(NEW);
    seq := COALESCE((row_json ->> 'seq')::integer, (row_json ->> 'message_range_start')::integer,
                    (row_json ->> 'end_sequence')::integer, (row_json ->> 'turn_seq')::integer - 1);
    IF row_json ? 'source_event_ids' THEN
        sources := ARRAY(SELECT jsonb_array_elements_text(row_json -> 'source_event_ids'));
    ELSIF row_json ? 'event_id' AND TG_TABLE_NAME = 'message_embeddings' THEN
        sources := ARRAY[NEW.event_id];
    END IF;
    IF erased_row(NEW.tenant_id, NEW.conversation_id, seq, sources) THEN
        IF TG_TABLE_NAME = 'memory' AND TG_OP = 'UPDATE' THEN
            -- A completion that read erased messages: the row fails, with no text.
            NEW.status := 'failed';
            NEW.memory_text := NULL;
            NEW.source_event_ids := '{}';
            NEW.completed_at := NULL;
            NEW.error := 'its inputs were erased';
            RETURN NEW;
        END IF;
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
