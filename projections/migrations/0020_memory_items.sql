-- One search per context (issue 25, docs/retrieval.md "The memory-items index"): every
-- retrievable item (live facts, chunks, user/assistant messages) in one table with its scope
-- columns, its words and its vector, so a turn-start context is one statement over one
-- scope instead of two index searches in each of three tables.
--
-- Kept on write, in the transaction of the projector that writes the source row (triggers:
-- a projector's rows, their index rows and its offsets commit together, and every write
-- path - the projectors, the batch replay's COPY, management events, erasure - is covered
-- without repeating its rules):
-- * memory_items: facts only while live (not deleted, not superseded), messages only when a
--   person wrote them (user/assistant). A message embedding may be projected before its
--   message (two projectors of one topic): it then waits in a row without content.
-- * memory_lexicon: per tenant, each lexeme's document frequency over memory_items (the IDF
--   the read used to count with one GIN lookup per word per table), and under lexeme ''
--   the tenant's number of items. Updated per statement, in (tenant, lexeme) order; the ''
--   row comes first, so it serialises the lexicon updates of one tenant (no deadlocks).
-- * memory_scopes: items per (tenant, user, subject), and shared facts per (tenant, subject):
--   the read picks an exact scan of a small scope or the HNSW index for a large one.
-- Existing rows are copied in at the end (the backfill of an existing deployment).
-- {{EMBEDDING_DIMENSIONS}} is filled in by `memory-agent migrate` from the settings.

CREATE TABLE memory_items (
    tenant_id       text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('fact', 'chunk', 'message')),
    item_id         text        NOT NULL,  -- fact_id, chunk_id, "<conversation_id>:<seq>"
    user_id         text        NOT NULL,  -- owner
    subject_id      text,
    shared          boolean     NOT NULL DEFAULT false,
    conversation_id text,
    seq             integer,               -- messages
    role            text,                  -- messages
    content         text,                  -- NULL: a message embedding waiting for its message
    content_tsv     tsvector,
    embedding       vector({{EMBEDDING_DIMENSIONS}}),  -- NULL: a message not embedded yet
    ts              timestamptz NOT NULL,  -- event time, for recency
    importance      smallint,
    category        text,
    memory_type     text,
    visibility      text,
    range_start     integer,
    range_end       integer,
    occurred_start  timestamptz,
    occurred_end    timestamptz,
    PRIMARY KEY (tenant_id, kind, item_id)
);
-- The vector stays in the row (never compressed or moved out: a long message's text is, first),
-- so an exact scan of a scope computes its distances without a TOAST read per item.
ALTER TABLE memory_items ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX memory_items_owner ON memory_items (tenant_id, user_id, subject_id);
CREATE INDEX memory_items_shared ON memory_items (tenant_id, subject_id) WHERE shared;
CREATE INDEX memory_items_conversation ON memory_items (tenant_id, conversation_id, seq) WHERE kind = 'message';
CREATE INDEX memory_items_tsv ON memory_items USING gin (content_tsv);
CREATE INDEX memory_items_embedding ON memory_items
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);

CREATE TABLE memory_lexicon (
    tenant_id text    NOT NULL,
    lexeme    text    NOT NULL,  -- '': the tenant's number of items
    df        integer NOT NULL,
    PRIMARY KEY (tenant_id, lexeme)
);

CREATE TABLE memory_scopes (
    tenant_id   text    NOT NULL,
    user_id     text    NOT NULL,  -- '': the shared facts of the subject, by anyone
    subject_key text    NOT NULL,  -- subject_id, '' for none
    items       integer NOT NULL,
    PRIMARY KEY (tenant_id, user_id, subject_key)
);

-- The source tables' triggers: per statement, set-based (a COPY of 20,000 facts is one
-- INSERT into memory_items, and one update of the statistics) ------------------------------

CREATE FUNCTION memory_items_put_facts(rows facts[]) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO memory_items AS m (tenant_id, kind, item_id, user_id, subject_id, shared, conversation_id, content,
                                   content_tsv, embedding, ts, importance, category, memory_type, visibility,
                                   occurred_start, occurred_end)
    SELECT f.tenant_id, 'fact', f.fact_id, f.owner_user_id, f.subject_id, f.visibility = 'shared',
           f.source_conversation_id, f.content, f.content_tsv, f.embedding, f.updated_at, f.importance, f.category,
           f.memory_type, f.visibility, f.valid_from, f.valid_from
    FROM unnest(rows) f WHERE f.deleted_at IS NULL AND f.valid_to IS NULL
    ORDER BY f.tenant_id, f.fact_id
    ON CONFLICT (tenant_id, kind, item_id) DO UPDATE SET
        user_id = EXCLUDED.user_id, subject_id = EXCLUDED.subject_id, shared = EXCLUDED.shared,
        conversation_id = EXCLUDED.conversation_id, content = EXCLUDED.content, content_tsv = EXCLUDED.content_tsv,
        embedding = EXCLUDED.embedding, ts = EXCLUDED.ts, importance = EXCLUDED.importance,
        category = EXCLUDED.category, memory_type = EXCLUDED.memory_type, visibility = EXCLUDED.visibility,
        occurred_start = EXCLUDED.occurred_start, occurred_end = EXCLUDED.occurred_end
    WHERE (m.user_id, m.subject_id, m.shared, m.conversation_id, m.content, m.embedding, m.ts, m.importance,
           m.category, m.memory_type, m.occurred_start) IS DISTINCT FROM
          (EXCLUDED.user_id, EXCLUDED.subject_id, EXCLUDED.shared, EXCLUDED.conversation_id, EXCLUDED.content,
           EXCLUDED.embedding, EXCLUDED.ts, EXCLUDED.importance, EXCLUDED.category, EXCLUDED.memory_type,
           EXCLUDED.occurred_start);
$$;

CREATE FUNCTION memory_items_put_chunks(rows conversation_chunks[]) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO memory_items AS m (tenant_id, kind, item_id, user_id, subject_id, conversation_id, content,
                                   content_tsv, embedding, ts, range_start, range_end, occurred_start, occurred_end)
    SELECT c.tenant_id, 'chunk', c.chunk_id, c.user_id, c.subject_id, c.conversation_id, c.content, c.content_tsv,
           c.embedding, COALESCE(c.occurred_end, c.created_at), c.message_range_start, c.message_range_end,
           COALESCE(c.occurred_start, c.created_at), COALESCE(c.occurred_end, c.created_at)
    FROM unnest(rows) c ORDER BY c.tenant_id, c.chunk_id
    ON CONFLICT (tenant_id, kind, item_id) DO UPDATE SET
        user_id = EXCLUDED.user_id, subject_id = EXCLUDED.subject_id, conversation_id = EXCLUDED.conversation_id,
        content = EXCLUDED.content, content_tsv = EXCLUDED.content_tsv, embedding = EXCLUDED.embedding,
        ts = EXCLUDED.ts, range_start = EXCLUDED.range_start, range_end = EXCLUDED.range_end,
        occurred_start = EXCLUDED.occurred_start, occurred_end = EXCLUDED.occurred_end
    WHERE (m.user_id, m.subject_id, m.conversation_id, m.content, m.embedding, m.ts, m.range_start,
           m.occurred_start) IS DISTINCT FROM
          (EXCLUDED.user_id, EXCLUDED.subject_id, EXCLUDED.conversation_id, EXCLUDED.content, EXCLUDED.embedding,
           EXCLUDED.ts, EXCLUDED.range_start, EXCLUDED.occurred_start);
$$;

-- A message and its embedding come from two projectors of one topic, in either order: each
-- upserts its half, and whichever commits second completes the row (a row without content
-- waits for its message and is never searched).
CREATE FUNCTION memory_items_put_messages(rows messages[]) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO memory_items AS m (tenant_id, kind, item_id, user_id, subject_id, conversation_id, seq, role, content,
                                   content_tsv, ts, range_start, range_end, occurred_start, occurred_end)
    SELECT t.tenant_id, 'message', t.conversation_id || ':' || t.seq, t.user_id, t.subject_id, t.conversation_id,
           t.seq, t.role, t.content, t.content_tsv, t.occurred_at, t.seq, t.seq + 1, t.occurred_at, t.occurred_at
    FROM unnest(rows) t WHERE t.role IN ('user', 'assistant') ORDER BY t.tenant_id, t.conversation_id, t.seq
    ON CONFLICT (tenant_id, kind, item_id) DO UPDATE SET
        user_id = EXCLUDED.user_id, subject_id = EXCLUDED.subject_id, role = EXCLUDED.role,
        content = EXCLUDED.content, content_tsv = EXCLUDED.content_tsv, ts = EXCLUDED.ts,
        occurred_start = EXCLUDED.occurred_start, occurred_end = EXCLUDED.occurred_end
    WHERE (m.user_id, m.subject_id, m.role, m.content, m.ts) IS DISTINCT FROM
          (EXCLUDED.user_id, EXCLUDED.subject_id, EXCLUDED.role, EXCLUDED.content, EXCLUDED.ts);
$$;

CREATE FUNCTION memory_items_put_message_embeddings(rows message_embeddings[]) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO memory_items AS m (tenant_id, kind, item_id, user_id, subject_id, conversation_id, seq, embedding,
                                   ts, range_start, range_end, occurred_start, occurred_end)
    SELECT e.tenant_id, 'message', e.conversation_id || ':' || e.seq, e.user_id, e.subject_id, e.conversation_id,
           e.seq, e.embedding, e.occurred_at, e.seq, e.seq + 1, e.occurred_at, e.occurred_at
    FROM unnest(rows) e ORDER BY e.tenant_id, e.conversation_id, e.seq
    ON CONFLICT (tenant_id, kind, item_id) DO UPDATE SET embedding = EXCLUDED.embedding
    WHERE m.embedding IS DISTINCT FROM EXCLUDED.embedding;
$$;

-- Removed from the index: deleted rows, facts no longer live, messages no longer a person's.
CREATE FUNCTION memory_items_drop(kind text, tenants text[], ids text[]) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    DELETE FROM memory_items m USING unnest(tenants, ids) AS d(tenant_id, item_id)
    WHERE m.tenant_id = d.tenant_id AND m.kind = memory_items_drop.kind AND m.item_id = d.item_id;
$$;

CREATE FUNCTION memory_items_facts_changed() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM memory_items_drop('fact', array_agg(o.tenant_id), array_agg(o.fact_id)) FROM old_rows o
        HAVING count(*) > 0;
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM memory_items_drop('fact', array_agg(o.tenant_id), array_agg(o.fact_id)) FROM old_rows o
        WHERE NOT EXISTS (
            SELECT 1 FROM new_rows n WHERE n.tenant_id = o.tenant_id AND n.fact_id = o.fact_id
            AND n.deleted_at IS NULL AND n.valid_to IS NULL)
        HAVING count(*) > 0;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM memory_items_put_facts(array_agg(n::facts)) FROM new_rows n HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_items_chunks_changed() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM memory_items_drop('chunk', array_agg(o.tenant_id), array_agg(o.chunk_id)) FROM old_rows o
        HAVING count(*) > 0;
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM memory_items_drop('chunk', array_agg(o.tenant_id), array_agg(o.chunk_id)) FROM old_rows o
        WHERE NOT EXISTS (
            SELECT 1 FROM new_rows n WHERE n.tenant_id = o.tenant_id AND n.chunk_id = o.chunk_id)
        HAVING count(*) > 0;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM memory_items_put_chunks(array_agg(n::conversation_chunks)) FROM new_rows n HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_items_messages_changed() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM memory_items_drop('message', array_agg(o.tenant_id), array_agg(o.conversation_id || ':' || o.seq))
        FROM old_rows o HAVING count(*) > 0;
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM memory_items_drop('message', array_agg(o.tenant_id), array_agg(o.conversation_id || ':' || o.seq))
        FROM old_rows o
        WHERE NOT EXISTS (
            SELECT 1 FROM new_rows n WHERE (n.tenant_id, n.conversation_id, n.seq) = (o.tenant_id, o.conversation_id, o.seq)
            AND n.role IN ('user', 'assistant'))
        HAVING count(*) > 0;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM memory_items_put_messages(array_agg(n::messages)) FROM new_rows n HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_items_message_embeddings_changed() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE memory_items m SET embedding = NULL FROM old_rows o
        WHERE m.tenant_id = o.tenant_id AND m.kind = 'message' AND m.item_id = o.conversation_id || ':' || o.seq
        AND m.embedding IS NOT NULL;
        DELETE FROM memory_items m USING old_rows o
        WHERE m.tenant_id = o.tenant_id AND m.kind = 'message' AND m.item_id = o.conversation_id || ':' || o.seq
        AND m.content IS NULL;
    ELSE
        PERFORM memory_items_put_message_embeddings(array_agg(n::message_embeddings)) FROM new_rows n HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER facts_memory_items_inserted AFTER INSERT ON facts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_facts_changed();
CREATE TRIGGER facts_memory_items_updated AFTER UPDATE ON facts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_facts_changed();
CREATE TRIGGER facts_memory_items_deleted AFTER DELETE ON facts
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_facts_changed();
CREATE TRIGGER conversation_chunks_memory_items_inserted AFTER INSERT ON conversation_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_chunks_changed();
CREATE TRIGGER conversation_chunks_memory_items_updated AFTER UPDATE ON conversation_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_chunks_changed();
CREATE TRIGGER conversation_chunks_memory_items_deleted AFTER DELETE ON conversation_chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_chunks_changed();
CREATE TRIGGER messages_memory_items_inserted AFTER INSERT ON messages
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_messages_changed();
CREATE TRIGGER messages_memory_items_updated AFTER UPDATE ON messages
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_messages_changed();
CREATE TRIGGER messages_memory_items_deleted AFTER DELETE ON messages
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_messages_changed();
CREATE TRIGGER message_embeddings_memory_items_inserted AFTER INSERT ON message_embeddings
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_message_embeddings_changed();
CREATE TRIGGER message_embeddings_memory_items_updated AFTER UPDATE ON message_embeddings
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_message_embeddings_changed();
CREATE TRIGGER message_embeddings_memory_items_deleted AFTER DELETE ON message_embeddings
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_message_embeddings_changed();

-- The statistics, per statement on memory_items -------------------------------------------

CREATE FUNCTION memory_statistics_apply(tenants text[], users text[], subjects text[], shared boolean[],
                                        tsvs tsvector[], ds integer[]) RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $$
    WITH x AS (
        SELECT * FROM unnest(tenants, users, subjects, shared, tsvs, ds) AS x(tenant_id, user_id, subject_id, shared,
                                                                               content_tsv, d)
    ), c AS (
        SELECT tenant_id, lexeme, sum(d)::integer AS d FROM (
            SELECT x.tenant_id, '' AS lexeme, x.d FROM x
            UNION ALL
            SELECT x.tenant_id, u.lexeme, x.d FROM x, unnest(x.content_tsv) u
        ) y GROUP BY tenant_id, lexeme HAVING sum(d) <> 0
    )
    INSERT INTO memory_lexicon AS l (tenant_id, lexeme, df)
    SELECT tenant_id, lexeme, d FROM c
    UNION ALL  -- the tenant's '' row first, even when its count stays: it orders the lexicon's writers
    SELECT DISTINCT tenant_id, '', 0 FROM c
    WHERE NOT EXISTS (SELECT 1 FROM c AS n WHERE n.tenant_id = c.tenant_id AND n.lexeme = '')
    ORDER BY 1, 2
    ON CONFLICT (tenant_id, lexeme) DO UPDATE SET df = l.df + EXCLUDED.df;

    INSERT INTO memory_scopes AS s (tenant_id, user_id, subject_key, items)
    SELECT tenant_id, user_id, subject_key, sum(d) FROM (
        SELECT x.tenant_id, x.user_id, COALESCE(x.subject_id, '') AS subject_key, x.d
        FROM unnest(tenants, users, subjects, shared, ds) AS x(tenant_id, user_id, subject_id, shared, d)
        UNION ALL
        SELECT x.tenant_id, '', x.subject_id, x.d
        FROM unnest(tenants, users, subjects, shared, ds) AS x(tenant_id, user_id, subject_id, shared, d)
        WHERE x.shared AND x.subject_id IS NOT NULL
    ) c GROUP BY tenant_id, user_id, subject_key HAVING sum(d) <> 0 ORDER BY tenant_id, user_id, subject_key
    ON CONFLICT (tenant_id, user_id, subject_key) DO UPDATE SET items = s.items + EXCLUDED.items;

    -- Nothing of an erased text stays as a key: a lexeme (a word of it) or a scope counted down
    -- to zero goes (the erasure's scrub then rewrites both tables: projections/erasure.py).
    DELETE FROM memory_lexicon l WHERE l.tenant_id = ANY(tenants) AND l.df <= 0 AND l.lexeme <> ''
        AND l.lexeme IN (SELECT u.lexeme FROM unnest(tsvs) AS v(t), unnest(v.t) u);
    DELETE FROM memory_scopes s WHERE s.tenant_id = ANY(tenants) AND s.items <= 0
        AND (s.user_id = ANY(users) OR s.user_id = '');
$$;

-- One function per operation: a statement trigger only sees the transition tables it declares.
CREATE FUNCTION memory_items_inserted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_statistics_apply(array_agg(tenant_id), array_agg(user_id), array_agg(subject_id),
                                    array_agg(shared), array_agg(content_tsv), array_agg(1))
    FROM new_rows WHERE content IS NOT NULL HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE FUNCTION memory_items_deleted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_statistics_apply(array_agg(tenant_id), array_agg(user_id), array_agg(subject_id),
                                    array_agg(shared), array_agg(content_tsv), array_agg(-1))
    FROM old_rows WHERE content IS NOT NULL HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE FUNCTION memory_items_updated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_statistics_apply(array_agg(tenant_id), array_agg(user_id), array_agg(subject_id),
                                    array_agg(shared), array_agg(content_tsv), array_agg(d))
    FROM (SELECT n.tenant_id, n.user_id, n.subject_id, n.shared, n.content_tsv, 1 AS d
          FROM new_rows n WHERE n.content IS NOT NULL
          UNION ALL
          SELECT o.tenant_id, o.user_id, o.subject_id, o.shared, o.content_tsv, -1
          FROM old_rows o WHERE o.content IS NOT NULL) x
    HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_items_inserted AFTER INSERT ON memory_items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_inserted();
CREATE TRIGGER memory_items_updated AFTER UPDATE ON memory_items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_updated();
CREATE TRIGGER memory_items_deleted AFTER DELETE ON memory_items
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_items_deleted();

-- The backfill of an existing deployment (the triggers above count it) ---------------------

INSERT INTO memory_items (tenant_id, kind, item_id, user_id, subject_id, shared, conversation_id, content, content_tsv,
                          embedding, ts, importance, category, memory_type, visibility, occurred_start, occurred_end)
SELECT tenant_id, 'fact', fact_id, owner_user_id, subject_id, visibility = 'shared', source_conversation_id, content,
       content_tsv, embedding, updated_at, importance, category, memory_type, visibility, valid_from, valid_from
FROM facts WHERE deleted_at IS NULL AND valid_to IS NULL;
INSERT INTO memory_items (tenant_id, kind, item_id, user_id, subject_id, conversation_id, content, content_tsv,
                          embedding, ts, range_start, range_end, occurred_start, occurred_end)
SELECT tenant_id, 'chunk', chunk_id, user_id, subject_id, conversation_id, content, content_tsv, embedding,
       COALESCE(occurred_end, created_at), message_range_start, message_range_end,
       COALESCE(occurred_start, created_at), COALESCE(occurred_end, created_at)
FROM conversation_chunks;
INSERT INTO memory_items (tenant_id, kind, item_id, user_id, subject_id, conversation_id, seq, role, content,
                          content_tsv, embedding, ts, range_start, range_end, occurred_start, occurred_end)
SELECT t.tenant_id, 'message', t.conversation_id || ':' || t.seq, t.user_id, t.subject_id, t.conversation_id, t.seq,
       t.role, t.content, t.content_tsv, e.embedding, t.occurred_at, t.seq, t.seq + 1, t.occurred_at, t.occurred_at
FROM messages t LEFT JOIN message_embeddings e
  ON e.tenant_id = t.tenant_id AND e.conversation_id = t.conversation_id AND e.seq = t.seq
WHERE t.role IN ('user', 'assistant');
