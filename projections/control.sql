-- Shared by every generation of a deployment (in the public schema): which generations
-- exist and which one serves reads, and the LLM result cache that makes replays cheap.

CREATE TABLE IF NOT EXISTS public.memory_generations (
    topic_prefix  text        NOT NULL,
    name          text        NOT NULL,
    status        text        NOT NULL DEFAULT 'building'
                              CHECK (status IN ('building', 'active', 'retired', 'cancelled')),
    is_active     boolean     NOT NULL DEFAULT false,
    config        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    replay_until  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    activated_at  timestamptz,
    PRIMARY KEY (topic_prefix, name)
);
CREATE UNIQUE INDEX IF NOT EXISTS memory_generations_one_active
    ON public.memory_generations (topic_prefix) WHERE is_active;

CREATE TABLE IF NOT EXISTS public.llm_cache (
    cache_key      text        PRIMARY KEY,
    kind           text        NOT NULL,
    model          text        NOT NULL,
    prompt_version text        NOT NULL,
    output         jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS public.llm_cache_usage (
    topic_prefix text   NOT NULL,
    generation   text   NOT NULL,
    kind         text   NOT NULL,
    hits         bigint NOT NULL DEFAULT 0,
    calls        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_prefix, generation, kind)
);

-- Document embeddings by (model, dimensions, sha256 of the exact text the model saw, prefix
-- included): a message embedded by the message index is not embedded again by the topic stages,
-- and a replay without a model change embeds nothing (memory_agent/embeddings/cache.py).
CREATE TABLE IF NOT EXISTS public.embedding_cache (
    model       text        NOT NULL,
    dimensions  integer     NOT NULL,
    text_sha256 bytea       NOT NULL,
    vector      bytea       NOT NULL,  -- float32 little-endian, `dimensions` values
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, dimensions, text_sha256)
);
-- An erasure deletes the vectors of the erased texts by hash, whatever the model (projections/erasure.py).
-- Guarded: CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table even when the index exists,
-- held to the end of the migration's transaction, which would stall every embedder's cache write.
DO $$ BEGIN
    IF to_regclass('public.embedding_cache_text') IS NULL THEN
        CREATE INDEX IF NOT EXISTS embedding_cache_text ON public.embedding_cache (text_sha256);
    END IF;
END $$;

-- The hashes of texts an erasure removed from public.embedding_cache, per deployment (topic
-- prefix): that deployment never caches a vector of one of them again (a consumer that read the
-- text from the log before the erasure reached it may embed it afterwards;
-- memory_agent/embeddings/cache.py's insert skips these keys). A hash, not the text; the
-- deployment simply embeds such a text without the cache from then on.
CREATE TABLE IF NOT EXISTS public.erased_text_keys (
    deployment  text        NOT NULL,
    text_sha256 bytea       NOT NULL,
    erased_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (deployment, text_sha256)
);

-- Where each LLM-cache entry came from (memory_agent/llm/provenance.py): one row per entry and
-- conversation whose stage request wrote or used it, so an erasure finds the entries by
-- provenance. The model and prompt version are the entry's own columns.
CREATE TABLE IF NOT EXISTS public.llm_cache_sources (
    cache_key       text        NOT NULL,
    tenant_id       text        NOT NULL,
    conversation_id text        NOT NULL,
    user_id         text        NOT NULL,
    event_id        text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cache_key, tenant_id, conversation_id)
);
DO $$ BEGIN  -- guarded for the same reason (the stages write this table on every LLM call)
    IF to_regclass('public.llm_cache_sources_conversation') IS NULL THEN
        CREATE INDEX IF NOT EXISTS llm_cache_sources_conversation ON public.llm_cache_sources (tenant_id, conversation_id);
    END IF;
END $$;

-- The last judgements of a generation against another (`generations judge`, issue 26): the
-- overall figures the gate and the dashboard read; the per-turn report as data.
CREATE TABLE IF NOT EXISTS public.generation_judgements (
    topic_prefix text        NOT NULL,
    a            text        NOT NULL,
    b            text        NOT NULL,
    judged_at    timestamptz NOT NULL DEFAULT now(),
    overall      jsonb       NOT NULL,
    report       jsonb       NOT NULL,
    PRIMARY KEY (topic_prefix, a, b, judged_at)
);
