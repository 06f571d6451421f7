-- A topic row about one message of a mixed conversation (another user's conversation the erased
-- user wrote in) is erased when that message was: in the live race (docs/lineage.md, "In time
-- order across partitions") the topic projector can reach the fold's assignment of an erased
-- message after the erasure was applied. Those rows carry the message's seq but not its event
-- id, so the tombstone's event ids (erasure_tombstones.event_ids) cannot match them; the seqs
-- the erasure recorded (erasure_rederive.erased_seqs) and the messages it kept from being
-- projected (erased_messages) can. Only the per-message topic tables are checked by seq: a
-- summary or chunk ending at an erased seq is matched by its sources, as before.
CREATE FUNCTION erased_seq(tenant text, conversation text, at_seq integer) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT EXISTS (SELECT 1 FROM erasure_rederive r
                    WHERE r.tenant_id = tenant AND r.conversation_id = conversation AND at_seq = ANY(r.erased_seqs))
        OR EXISTS (SELECT 1 FROM erased_messages m
                    WHERE m.tenant_id = tenant AND m.conversation_id = conversation AND m.seq = at_seq)
$$;

CREATE OR REPLACE FUNCTION drop_erased() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
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
    IF erased_row(NEW.tenant_id, NEW.conversation_id, seq, sources)
       OR (TG_TABLE_NAME IN ('topic_messages', 'topic_unassigned', 'topic_assignments') AND seq IS NOT NULL
           AND erased_seq(NEW.tenant_id, NEW.conversation_id, seq)) THEN
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
