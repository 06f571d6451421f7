"""One typed settings object, built from MEMORY_* environment variables on demand."""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,40}$")


class KafkaSettings(BaseModel):
    bootstrap_servers: str = "127.0.0.1:19092"
    # Every topic this deployment uses starts with this prefix (tests use a unique one).
    topic_prefix: str = "memory"
    partitions: int = Field(default=8, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    # Broker-side cap is 1 MiB by default; the codec refuses bigger events first.
    max_event_bytes: int = Field(default=512 * 1024, ge=1024)
    # A dead letter bigger than this carries a cut original with its size and hash (the
    # record cap of brokers and producers is ~1 MiB).
    max_dead_letter_bytes: int = Field(default=900 * 1024, ge=16 * 1024)
    # Longest a stream agent's fetch waits at the broker for new records (faust's own is 1.5 s,
    # which adds up to that much latency per hop: streams/kafka_transport.py).
    fetch_max_wait_ms: int = Field(default=50, ge=1, le=10_000)
    # The same for a consumer that has read nothing for 2 s: an idle worker's ~14 consumers
    # polled ~280 times a second at 50 ms (runtime/fetch_pace.py, docs/scaling.md).
    idle_fetch_max_wait_ms: int = Field(default=500, ge=1, le=10_000)
    # The projectors of derived events (not those reads see first: messages, erasure, message
    # index) ask the broker for at least this much per fetch while records flow, so it answers
    # after fetch_max_wait_ms (50 ms) with a batch rather than at once with one record: fewer
    # fetches and PostgreSQL transactions, up to 50 ms later in the read model (docs/scaling.md).
    projector_fetch_min_bytes: int = Field(default=64 * 1024, ge=1)
    # A consumer that stops heartbeating (a killed worker) leaves its group after this long;
    # until then a restarted worker waits in "(Re-)joining group" (faust's own default: 60 s).
    session_timeout_s: float = Field(default=10.0, ge=6.0, le=300.0)
    # Records the conversation processor holds ahead of its fold (faust's `stream_buffer_maxsize`):
    # one queue for the conversation and the memory topic, so a stage's result waits behind up to
    # this many messages of a burst (docs/scaling.md, burst10).
    stream_buffer_maxsize: int = Field(default=4096, ge=16)
    # Bytes of one partition a fetch of the conversation processor takes at most (faust's
    # `consumer_max_fetch_size`; also its tables' changelog restores).
    stream_max_fetch_bytes: int = Field(default=1024 * 1024, ge=64 * 1024)

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}.{name}"

    @property
    def conversation_topic(self) -> str:
        """The truth: every message and management event, keyed by conversation."""
        return self.topic("conversation-events")

    @property
    def dead_letter_topic(self) -> str:
        return self.topic("dead-letter")

    def memory_topic(self, generation: str) -> str:
        """Derived events of one generation (summaries, facts, chunks, topics)."""
        return self.topic(f"{generation}.memory-events")


class PostgresSettings(BaseModel):
    dsn: str = "postgresql://postgres@127.0.0.1:15432/memory_agent"
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)


ActAs = Literal["nobody", "conversation_owner", "any_user"]
HASHED_PREFIX = "sha256:"
DEV_API_KEY, DEV_ADMIN_KEY = "dev-key", "dev-admin-key"


def key_digest(entry: str) -> bytes:
    """The SHA-256 digest a configured key stands for: `sha256:<64 hex>` is a digest already
    (keys hashed at rest), anything else is a plain key (accepted outside production)."""
    if entry.startswith(HASHED_PREFIX):
        return bytes.fromhex(entry.removeprefix(HASHED_PREFIX))
    return hashlib.sha256(entry.encode()).digest()


def _check_key_entry(entry: str) -> str:
    if not entry or not entry.strip():
        raise ValueError("an API key must not be empty (an empty key would let requests without a key in)")
    if entry.startswith(HASHED_PREFIX):
        digest = entry.removeprefix(HASHED_PREFIX)
        if not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise ValueError(f"{HASHED_PREFIX}... must be followed by the 64 hex digits of a SHA-256 digest")
        if digest.lower() == hashlib.sha256(b"").hexdigest():
            raise ValueError("that is the SHA-256 of the empty key: refused")
    return entry


class ApiKeyGrant(BaseModel):
    """What one API key may do (docs/security.md). A key bound to `user` acts only as that user;
    a service key (no user) acts for users as far as `act_as` grants:
    "nobody" (ingest only), "conversation_owner" (read a conversation as its owner, the
    default) or "any_user" (may name any user of the tenant; every such act is logged)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    tenant: str = Field(min_length=1, max_length=200)
    user: str | None = Field(None, min_length=1, max_length=200)
    act_as: ActAs | None = None
    # Shown in logs instead of the key (default: the first 8 hex digits of its digest).
    name: str | None = Field(None, max_length=100)

    @model_validator(mode="after")
    def _users_act_for_themselves(self) -> "ApiKeyGrant":
        if self.user is not None and self.act_as is not None:
            raise ValueError("a key bound to a user acts only as that user: drop act_as")
        return self

    @property
    def scope(self) -> ActAs:
        return self.act_as or "conversation_owner"


class ApiSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)

    host: str = "127.0.0.1"
    port: int = 8080
    # Processes of `memory-agent api` (uvicorn workers sharing the port; each loads the model).
    workers: int = Field(default=1, ge=1)
    # API key -> tenant id, or -> a grant {"tenant", "user"?, "act_as"?, "name"?}. A key is
    # plain (development and tests) or "sha256:<hex digest>" (hashed at rest; production
    # takes only these). Every read and write is scoped to the key's tenant; a plain tenant
    # string is a service key acting as each conversation's owner (docs/security.md).
    api_keys: dict[str, str | ApiKeyGrant] = Field(
        default_factory=lambda: {DEV_API_KEY: ApiKeyGrant(tenant="demo", act_as="any_user", name="dev")}
    )
    # Keys for the operator endpoints (/v1/admin: generations and replay progress), plain or hashed.
    admin_keys: list[str] = Field(default_factory=lambda: [DEV_ADMIN_KEY])
    # Keys a Prometheus scraper presents to the API's /metrics (`Authorization: Bearer KEY`),
    # plain or hashed; an admin key works too. /metrics answers 401 without one: its counters
    # move with every tenant's requests (docs/security.md, "Metrics").
    metrics_keys: list[str] = Field(default_factory=list)
    # How long /context may wait for the projection to reach ?min_seq.
    max_wait_ms: int = Field(default=2000, ge=0)
    # /context waits for min_seq only when it is at most this far past the conversation's
    # last projected seq (further is not reachable within a wait; answered at once).
    max_seq_ahead: int = Field(default=10_000, ge=0)
    # Every statement of the API's pool is cancelled after this long (answered 503).
    statement_timeout_ms: int = Field(default=5000, ge=100)
    # Longest a request waits for a pooled connection before a 503 with Retry-After.
    pool_timeout_s: float = Field(default=5.0, gt=0)
    # Pooled connections one tenant may hold at once, and how long a request waits for one
    # of its tenant's slots before a 429 with Retry-After (keeps one tenant from starving others).
    # None (default): the whole pool when the keys name one tenant, else 60 % of it
    # (api/limits.py tenant_share: 6 of 10).
    tenant_max_connections: int | None = Field(default=None, ge=1)
    tenant_queue_ms: int = Field(default=2000, ge=0)
    # Longest an ingest or fact decision waits for the broker's acknowledgement (then 503).
    produce_timeout_s: float = Field(default=5.0, gt=0)
    # /readyz: longest each dependency check may take.
    ready_timeout_s: float = Field(default=2.0, gt=0)

    @field_validator("api_keys")
    @classmethod
    def _no_empty_api_keys(cls, value: dict) -> dict:
        for entry in value:
            _check_key_entry(entry)
        return value

    @field_validator("admin_keys", "metrics_keys")
    @classmethod
    def _no_empty_admin_keys(cls, value: list[str]) -> list[str]:
        return [_check_key_entry(entry) for entry in value]

    def grants(self) -> dict[str, ApiKeyGrant]:
        """Every API key with its grant (a plain tenant string is a service key)."""
        return {k: ApiKeyGrant(tenant=g) if isinstance(g, str) else g for k, g in self.api_keys.items()}

    def tenants(self) -> set[str]:
        """The tenants the API keys name."""
        return {grant.tenant for grant in self.grants().values()}


class LimitsSettings(BaseModel):
    max_content_chars: int = Field(default=32_000, ge=1)
    # A message's metadata, JSON-encoded (HTTP answers 413 above it).
    max_metadata_bytes: int = Field(default=64 * 1024, ge=256)
    max_id_chars: int = Field(default=200, ge=8)


class WindowSettings(BaseModel):
    """Seed 000's sliding-window summary rules."""

    window_size: int = Field(default=14, ge=2)
    summarize_after_seq: int = Field(default=5, ge=0)
    # A request with no result after this long is re-issued (worker crash, lost call).
    request_timeout_s: float = Field(default=120.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    # Replay: a summary every this many seqs of historic messages (deterministic windows).
    replay_stride: int = Field(default=4, ge=1)
    # Catch-up: when a summary completes or fails (or the timer ticks) and at least this many
    # live messages lie past the latest completed summary, the newest round end's window is
    # requested at once (docs/summaries.md, "Catch-up"). None: window_size.
    catch_up_backlog: int | None = Field(default=None, ge=1)
    # Turn-start context: the verbatim gap after the summary keeps at most its newest this
    # many messages / bytes (JSON) and names the seqs it left out (docs/summaries.md).
    context_max_gap_messages: int = Field(default=40, ge=0, le=1000)
    context_max_gap_bytes: int = Field(default=32_768, ge=0, le=1_048_576)
    # Batch replay (memory_agent/batch_replay/): processes sharing the partitions.
    replay_batch_processes: int = Field(default=2, ge=1)
    # PostgreSQL workers helping to build memory_items' HNSW index after a batch replay
    # (max_parallel_maintenance_workers); 0: the backend alone. A parallel build that fails
    # (its shared memory does not fit a container's /dev/shm) is done again without them.
    replay_index_build_workers: int = Field(default=1, ge=0, le=16)


class LlmSettings(BaseModel):
    # "extractive": offline non-LLM fallback; "openai": any OpenAI-compatible endpoint.
    provider: Literal["extractive", "openai"] = "extractive"
    base_url: str | None = None
    api_key: SecretStr = SecretStr("not-needed")
    model: str = "gpt-4.1-mini"
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    concurrency: int = Field(default=8, ge=1)
    summary_prompt_version: str = "summary-v1"
    chunk_facts_prompt_version: str = "chunk-facts-v3"
    gate_prompt_version: str = "gate-v1"
    # Cheap model for the "worth remembering?" gate (seed 001); None means `model`.
    gate_model: str | None = None
    # Exponential backoff with jitter between retries of 429/5xx/timeouts/connection errors.
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8.0, ge=0)
    temperature: float = Field(default=0.0, ge=0, le=2)
    # Ask for response_format={"type": "json_object"}; turn off for servers without it.
    json_mode: bool = True
    # Offline extractive summarizer: length budget of one summary.
    extractive_max_chars: int = Field(default=600, ge=80)
    # Results cached in PostgreSQL by (model, prompt version, input hash): a replay with
    # unchanged inputs makes no LLM calls.
    cache_enabled: bool = True


class EmbeddingSettings(BaseModel):
    # "stub": deterministic vectors with no model (benchmarks of the plumbing, never for recall).
    provider: Literal["local", "openai", "stub"] = "local"
    # Document embeddings cached in public.embedding_cache by (model, text hash): every consumer
    # of a message shares one model call, a replay embeds nothing new (docs/llm-and-embeddings.md).
    cache_enabled: bool = True
    base_url: str | None = None
    api_key: SecretStr = SecretStr("not-needed")
    model: str = "all-MiniLM-L6-v2"
    dimensions: int = 384
    # None: use the known prefixes of `model` (nomic: "search_query: "/"search_document: ");
    # a string (even "") overrides them.
    query_prefix: str | None = None
    document_prefix: str | None = None
    # Texts per model call (local: per ONNX run; remote: per request).
    batch_size: int = Field(default=32, ge=1)
    # Local ONNX model: intra-op threads (0 = auto: half the cores, at least one).
    intra_op_threads: int = Field(default=0, ge=0)
    # The process's one embedding queue (local and stub models; docs/llm-and-embeddings.md): an idle
    # model waits this long for more requests to batch with the first; callers wait while this
    # many texts are submitted and not yet embedded.
    queue_linger_ms: float = Field(default=2.0, ge=0)
    # Texts submitted to the queue and not yet embedded past which callers wait (backpressure).
    queue_max_pending: int = Field(default=4096, ge=1)
    max_length: int = Field(default=256, ge=8, le=512)
    # Local model: run the int8 export's weights as integer products (MatMulInteger, activations
    # quantized per row) instead of float32 ones: ~0.5-0.6 of the CPU, vectors ~0.997 cosine to the
    # float graph's, so another model: named "all-MiniLM-L6-v2-onnx-int8+int2" in every stored row,
    # event and embedding_cache row. It chooses the graph of a generation that stores no vector yet;
    # a generation keeps the graph of the vectors it has (runtime/embedding_graph.py, read when the
    # worker and the API start; docs/llm-and-embeddings.md "Two graphs of one model").
    integer_matmul: bool = False
    # Remote provider.
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    concurrency: int = Field(default=4, ge=1)
    # Send `dimensions` in the request; None: only for models known to accept it
    # (text-embedding-3-*). The returned vectors must have `dimensions` either way.
    send_dimensions: bool | None = None


class FactsSettings(BaseModel):
    """Seed 003's rolling chunks + facts and seed 001's two-tier extraction and dedup."""

    # Summarize once MORE than `summarization_threshold` messages are unsummarized,
    # the oldest `batch_size` at a time (seed 003: 30 and 20).
    summarization_threshold: int = Field(default=30, ge=0)
    batch_size: int = Field(default=20, ge=1)
    # A chunk request with no result after this long is re-issued (worker crash, lost call).
    request_timeout_s: float = Field(default=120.0, gt=0)
    # Attempts per range (failures and timeouts); then the range is skipped.
    max_attempts: int = Field(default=5, ge=1)
    failure_backoff_s: float = Field(default=30.0, ge=0)
    # Ranges a conversation's chunk fold asks for ahead of the one in flight while a backlog makes
    # them due (0: one at a time); the stage answers them one after another, in order.
    max_ahead: int = Field(default=31, ge=0)
    # A new fact this close (cosine) to a current one of the same owner and subject merges
    # into it; an owner's decision applies to a re-extracted fact this close (docs/facts.md).
    dedup_threshold: float = Field(default=0.85, gt=0, le=1)
    # "auto": the LLM gate when an LLM and a distinct gate model are configured, else the
    # heuristic gate; "off": every chunk goes to the extractor.
    gate: Literal["auto", "llm", "heuristic", "off"] = "auto"
    # Models per tier; None: llm.gate_model (then llm.model) for the gate, llm.model for
    # extraction. Prompt version None: llm.chunk_facts_prompt_version.
    gate_model: str | None = None
    extraction_model: str | None = None
    prompt_version: str | None = None
    max_facts_per_chunk: int = Field(default=20, ge=0)
    # Offline chunk summaries: the densest sentences (names, numbers, dates) up to this length.
    summary_max_chars: int = Field(default=1000, ge=80)
    # The owner's current facts of the subject shown to the extractor (seed 001: update or
    # merge instead of adding near-duplicates); 0 turns it off.
    related_facts: int = Field(default=12, ge=0, le=50)
    # How long the extraction stage waits for the chunk's messages to be projected.
    inputs_wait_s: float = Field(default=30.0, gt=0)


class RetrievalSettings(BaseModel):
    """Turn-start retrieval (seeds 001, 003): hybrid search, relevance score, threshold."""

    # final = similarity x importance weight x recency weight must be strictly above this.
    # Seed 001 says 0.45 for nomic-embed-text; all-MiniLM-L6-v2's cosines run lower
    # (measured on tests/support/labelled_set.py, see docs/retrieval.md).
    threshold: float = Field(default=0.25, ge=0)
    importance_scale: float = Field(default=3.0, gt=0)
    # The importance weight is (importance / importance_scale) ** this: 1 is seed 001's formula
    # (a five-fold range, 0.33-1.67, from rule-given importance that says nothing about the
    # question), 0 ranks without importance. 0.5 (0.58-1.29) gained answers on both the
    # development set and the generator on partial memory; on fully derived memory 0.25
    # (0.76-1.14) with stale_weight 0.9 and keyword_weight 1.0 did (docs/evaluation.md, issue 24).
    importance_power: float = Field(default=0.25, ge=0)
    fresh_days: float = Field(default=7.0, ge=0)
    stale_days: float = Field(default=90.0, gt=0)
    # Seed 001 says 0.5; long conversations ask about months-old events (docs/retrieval.md):
    # 0.8, then 0.9 on fully derived memory (docs/evaluation.md, issue 24).
    stale_weight: float = Field(default=0.9, ge=0, le=1)
    # Hits taken from each search (vector and keyword) of each table (facts and chunks).
    candidate_k: int = Field(default=20, ge=1, le=200)
    # The query is the current message plus this many earlier messages of the conversation.
    last_messages: int = Field(default=3, ge=0, le=20)
    # Characters of each earlier message and of the current one that go into the query.
    # (Embedding time grows with the text: ~0.13 ms of CPU per character here.)
    context_message_chars: int = Field(default=200, ge=0)
    query_chars: int = Field(default=500, ge=1)
    keyword_max_terms: int = Field(default=32, ge=1)
    # Words found in more than this share of a table's rows are not searched by keyword
    # (a stop list learnt from ANALYZE's statistics: they match too much to rank quickly).
    keyword_max_doc_fraction: float = Field(default=0.05, gt=0, le=1)
    # The API keeps each (tenant, word)'s document frequency (the keyword score's IDF) this
    # long, so a repeated word costs no count; 0 counts on every request.
    keyword_idf_cache_s: float = Field(default=30.0, ge=0)
    # ONNX Runtime threads of the API's query embedder (local model), when the embedding
    # settings leave intra_op_threads on auto (0): concurrent queries are batched by the process's
    # embedding queue on one thread; more threads cost more CPU than they save here
    # (docs/retrieval.md, docs/llm-and-embeddings.md). 0: auto.
    query_embedding_threads: int = Field(default=1, ge=0)
    # The API's query embedder (local model) runs the weights as int8 integer products
    # (`embedding.integer_matmul`): a question's embedding at ~0.5 of the CPU; matched against
    # items of the float graph (cosine ~0.99 to the float question's vector) the development set's
    # first-turn scores the same, 280 of 466 hits both ways (docs/retrieval.md, "Sixth round").
    # false: the documents' graph.
    query_integer_matmul: bool = True
    # Hybrid relevance: similarity = cosine + keyword_weight x keyword score, the IDF-weighted
    # share of the query's words an item contains (0..1, see docs/retrieval.md). 1: the
    # question's rare words count as much as the cosine (0.5 until issue 24's fourth session).
    keyword_weight: float = Field(default=1.0, ge=0)
    # An item longer than this many distinct words (a chunk: ~80) has its keyword score scaled
    # by (this / words) ** keyword_length_power: a long text contains a question's words by its
    # length alone (BM25's length normalisation; docs/evaluation.md, issue 24). 0: off.
    keyword_length_lexemes: int = Field(default=35, ge=0)
    # The power of that length weight: (keyword_length_lexemes / words) ** this (1: coverage
    # per keyword_length_lexemes words).
    keyword_length_power: float = Field(default=0.75, ge=0)
    # pgvector HNSW search breadth (>= candidate_k); iterative scans keep filtered searches full.
    ef_search: int = Field(default=64, ge=1, le=1000)
    # A bigger budget needs more candidates: hits per search per table are
    # max(candidate_k, min(max_candidate_k, budget_tokens x this / 100)).
    candidates_per_100_tokens: float = Field(default=20.0, ge=0)
    max_candidate_k: int = Field(default=200, ge=1, le=1000)
    # An item surfaced at an earlier turn within this many messages is still in what the chat
    # model sees and is skipped (seed 001: no repetition); after that it may come back.
    surfaced_window_seqs: int = Field(default=14, ge=0)
    # Messages longer than this many characters are cut to their best sentences when packed.
    message_chars: int = Field(default=400, ge=0)
    # A retrieved message that asks something carries the reply after it, cut to this many
    # characters, and is scored with the words of both (the answer is what a caller asks about
    # again; 0: questions alone, scored on their own words). 400,
    # as a message: cut to 240 on the question's words, a long reply lost the sentence that
    # answers (it rarely echoes the question; docs/evaluation.md, issue 24's fifth session).
    reply_chars: int = Field(default=400, ge=0)
    # A question-reply pair's thread (the two messages of its session before it) often holds
    # its subject ("I met my new neighbor Anna!" -> "How did you two meet?" -> "At yoga in the
    # park."): the query words only the thread holds count for the pair at this weight, and the
    # messages after a keyword hit are candidates. 0 (off): with continued_lines it added no
    # hit on the development set and lost one on the generator (docs/evaluation.md).
    thread_weight: float = Field(default=0.0, ge=0, le=1)
    # The best message lines (this many) go on with the same speaker's next turn, after a
    # question of the other's in the same session (asking for more): an answer spread over two turns
    # ("Sapiens" in one reply, "Avalanche" in the next) is one line (0: off; docs/retrieval.md).
    continued_lines: int = Field(default=2, ge=0)
    # The earlier messages' share of the query vector (the current message weighs 1): they
    # resolve follow-ups without drowning the question in small talk.
    context_weight: float = Field(default=0.3, ge=0, le=1)
    # Items with fewer distinct words than this ("Good to know.") have their similarity scaled
    # by sqrt(words / this): a name carries MiniLM's vector of a short reply (0: off).
    informative_lexemes: int = Field(default=6, ge=0)
    # The message-index projector embeds every user/assistant message (the log is memory).
    index_messages: bool = True
    # The search hands the ranking only its best max(candidate_k, this per 100 budget tokens)
    # candidates, scored by PostgreSQL with the ranking's own formula (retrieval/prescore.py): a
    # long conversation's few hundred rows cost the API's one event loop more than the rest of a
    # context (docs/retrieval.md, "Seventh round"). 16: 80 of a 500-token context's ~250 on the
    # development set, its answers unchanged (466 of 466). 0: every candidate the searches found.
    kept_per_100_tokens: float = Field(default=16.0, ge=0)


# Topic matching per embedding model: (similarity_threshold, active_topic_bonus), matched as
# substrings of the lower-cased model name, on cosines centred on the conversation
# (center_on_conversation). Measured with bench/topic_threshold_bench.py and
# bench/topic_segmentation.py on labelled multi-subject chats, long generated conversations
# and the development set (docs/topics.md); any other model gets seed 004's 0.7 on plain cosines.
SEED_TOPIC_MATCHING = (0.7, 0.0)
TOPIC_MATCHING_BY_MODEL: tuple[tuple[str, tuple[float, float]], ...] = (
    ("minilm-l6", (0.175, 0.15)),
)


def topic_matching_for(model: str) -> tuple[float, float]:
    name = model.lower()
    return next((pair for pattern, pair in TOPIC_MATCHING_BY_MODEL if pattern in name), SEED_TOPIC_MATCHING)


def topic_centering_for(model: str) -> bool:
    """Centred matching for the models whose values were measured centred; the seed's plain cosine else."""
    name = model.lower()
    return any(pattern in name for pattern, _ in TOPIC_MATCHING_BY_MODEL)


class TopicSettings(BaseModel):
    """Seed 004's topic memory: matching, compaction, decay, plus the agent's own limits."""

    max_topics: int = Field(default=20, ge=1)
    # A user message joins its best topic when cosine (+ active_topic_bonus for the
    # conversation's current topic) > similarity_threshold. Model-dependent: None takes the
    # embedding model's measured pair from TOPIC_MATCHING_BY_MODEL (Settings fills it in),
    # else seed 004's 0.7 and no bonus. See docs/topics.md.
    similarity_threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    active_topic_bonus: float | None = Field(default=None, ge=0.0, le=1.0)
    # Match on cosines with the conversation's mean user-message vector taken off (its
    # speakers' names and register): None = on for the models of TOPIC_MATCHING_BY_MODEL.
    center_on_conversation: bool | None = None
    # Centred matching takes off n / (n + background_warmup) of the conversation's mean while
    # it rests on few (n) user messages, so a short chat is matched on nearly plain cosines.
    background_warmup: int = Field(default=24, ge=0)
    # A pause this long since the active topic's last message ends its follow-up bonus (0: never).
    session_gap_s: float = Field(default=3600.0, ge=0)
    base_half_life_seconds: float = Field(default=86400.0, gt=0)
    max_half_life_seconds: float = Field(default=2592000.0, gt=0)
    access_threshold_for_lt: int = Field(default=5, ge=1)
    max_messages_per_topic: int = Field(default=12, ge=2)
    recent_message_keep: int = Field(default=4, ge=0)
    eviction_priority: float = Field(default=0.05, ge=0, le=1)
    default_importance: float = Field(default=0.5, ge=0, le=1)
    # Beyond the seed: also evict the lowest-priority topics until max_topics remain.
    capacity_eviction: bool = True
    compaction_timeout_s: float = Field(default=300.0, gt=0)
    compaction_retry_s: float = Field(default=300.0, ge=0)
    # A user message whose embedding has not come back after this long is asked for again,
    # at most embedding_max_attempts times; then it joins the active topic unmatched.
    embedding_timeout_s: float = Field(default=60.0, gt=0)
    embedding_max_attempts: int = Field(default=3, ge=1)
    # Messages held per conversation while they wait for an embedding (and the characters of
    # their text and vectors: the fold's state is one Kafka record). Beyond either, messages
    # are deferred, never dropped: read back from the projected log, backlog_batch at a time.
    max_waiting_messages: int = Field(default=100, ge=1)
    max_waiting_chars: int = Field(default=300_000, ge=1_000, le=600_000)
    backlog_batch: int = Field(default=100, ge=1, le=1_000)
    summary_prompt_version: str = "topic-summary-v1"
    # Turn-start context: wait this long for the topic fold to reach the current message,
    # and bring back at most this many archived messages on a restore.
    context_wait_ms: int = Field(default=500, ge=0)
    restore_max_messages: int = Field(default=200, ge=0)
    # ... and of those, at most this many tokens: the ones sharing the most words with the
    # current message first, then the newest (domain/topics/restore.py; 0: no bound).
    restore_max_tokens: int = Field(default=300, ge=0)

    @property
    def threshold(self) -> float:
        return SEED_TOPIC_MATCHING[0] if self.similarity_threshold is None else self.similarity_threshold

    @property
    def bonus(self) -> float:
        return SEED_TOPIC_MATCHING[1] if self.active_topic_bonus is None else self.active_topic_bonus

    def for_embedding_model(self, model: str) -> "TopicSettings":
        """The unset matching values filled in for `model` (measured ones, else the seed's)."""
        known = topic_matching_for(model)
        return self.model_copy(update={
            "similarity_threshold": known[0] if self.similarity_threshold is None else self.similarity_threshold,
            "active_topic_bonus": known[1] if self.active_topic_bonus is None else self.active_topic_bonus,
            "center_on_conversation": (topic_centering_for(model) if self.center_on_conversation is None
                                       else self.center_on_conversation),
        })

    @model_validator(mode="after")
    def _keep_fewer_than_the_limit(self) -> "TopicSettings":
        if self.recent_message_keep >= self.max_messages_per_topic:
            raise ValueError("recent_message_keep must be smaller than max_messages_per_topic")
        if self.max_half_life_seconds < self.base_half_life_seconds:
            raise ValueError("max_half_life_seconds must be at least base_half_life_seconds")
        return self


class ClientSettings(BaseModel):
    """How `memory-agent search|store|list|show|forget|export` and `memory-agent mcp` reach the API."""

    url: str | None = None  # default: http://{api.host}:{api.port}
    # Default: the first key of api.api_keys that is not hashed at rest (dev-key in development).
    api_key: SecretStr | None = None
    # The acting user, for a service key (sent as X-User-Id); a key bound to a user needs none.
    user: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)


class WorkerSettings(BaseModel):
    # The worker serves its Prometheus metrics here (0: not served).
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    # How often the consumer-lag gauge is refreshed from Kafka.
    lag_interval_s: float = Field(default=15.0, gt=0)


class TelemetrySettings(BaseModel):
    """OpenTelemetry traces over OTLP/HTTP (docs/observability.md); the standard OTEL_* variables
    (endpoint, headers, timeout, resource attributes, sampler) apply where these are unset."""

    # Export traces of the API's requests, the context read, the append and the worker's
    # processing (needs the `otel` extra). Off: no span is made (one check per hook).
    enabled: bool = False
    # OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces; unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    # else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else http://localhost:4318/v1/traces.
    endpoint: str | None = None
    # service.name of the spans; unset: OTEL_SERVICE_NAME, else memory-agent-api / memory-agent-worker.
    service_name: str | None = None
    # Share of new traces kept, 0..1 (a trace begun upstream keeps its caller's decision); unset:
    # OTEL_TRACES_SAMPLER (default: every trace).
    sample_ratio: float | None = Field(default=None, ge=0, le=1)


class PrivacySettings(BaseModel):
    """Crypto-shredding (docs/lineage.md): the free text of events (messages, derived texts,
    served queries, the topic fold's state) sealed with the keys of the users it came from."""

    encrypt_content: bool = False
    # Master keys wrapping the data keys in public.data_keys (core/master_keys.py,
    # docs/security.md): {key id: base64 of 32 random bytes}, here and/or in a JSON file of the
    # same shape; `master_key_id` wraps new keys (default: the only one). Production refuses
    # sealing without one.
    master_keys: dict[str, SecretStr] = {}
    master_key_file: Path | None = None
    master_key_id: str | None = None
    # Erasure on disk (docs/security.md): how often a projectors' process rewrites the tables
    # erasures deleted from and retires the WAL (projections/scrub.py); the erasure's bound on
    # disk is this plus the rewrite's time. Raise it to batch many erasures into one rewrite.
    scrub_interval_s: float = Field(10.0, gt=0)
    _ring: object = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _master_keys_are_valid(self) -> "PrivacySettings":
        from core.master_keys import MasterKeys, read_key_file  # noqa: PLC0415

        configured = read_key_file(self.master_key_file) if self.master_key_file else {}
        for key_id, secret in self.master_keys.items():
            if key_id in configured and configured[key_id] != secret.get_secret_value():
                raise ValueError(f"master key {key_id!r} differs between MEMORY_PRIVACY__MASTER_KEYS and the key file")
            configured[key_id] = secret.get_secret_value()
        self._ring = MasterKeys.of(configured, self.master_key_id)
        return self

    @property
    def master_key_ring(self):
        """The master keys (core.master_keys.MasterKeys); empty: data keys stored as they are."""
        return self._ring


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMORY_", env_nested_delimiter="__", frozen=True, extra="ignore",
        hide_input_in_errors=True,  # a refused setting's error never prints keys or DSNs
    )

    environment: Literal["development", "test", "production"] = "development"
    # A generation is one complete derived read model (Postgres schema + derived topics
    # + consumer groups). Replay builds a new one beside the live one.
    generation: str = "g1"
    state_dir: Path = Path(".state")
    log_level: str = "INFO"
    # Set for a replay generation: messages that occurred before this are history being
    # rebuilt (deterministic summary windows, see WindowSettings.replay_stride).
    replay_until: datetime | None = None
    # How a replay generation rebuilds that history: "stream" (the stream agents from the
    # start of the log) or "batch" (memory_agent/batch_replay/: window and facts systems).
    replay_mode: Literal["stream", "batch"] = "stream"
    # Which memory systems' stream agents the worker runs (projectors always run).
    systems: tuple[Literal["window", "facts", "topics"], ...] = ("window", "facts", "topics")

    kafka: KafkaSettings = KafkaSettings()
    postgres: PostgresSettings = PostgresSettings()
    api: ApiSettings = ApiSettings()
    limits: LimitsSettings = LimitsSettings()
    window: WindowSettings = WindowSettings()
    llm: LlmSettings = LlmSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    topics: TopicSettings = TopicSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    facts: FactsSettings = FactsSettings()
    client: ClientSettings = ClientSettings()
    worker: WorkerSettings = WorkerSettings()
    privacy: PrivacySettings = PrivacySettings()
    telemetry: TelemetrySettings = TelemetrySettings()

    @field_validator("generation")
    @classmethod
    def _generation_is_a_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("generation must match [a-z0-9][a-z0-9_]{0,40}")
        return value

    @model_validator(mode="after")
    def _topic_matching_for_the_embedder(self) -> "Settings":
        """Unset topic matching values take the configured embedding model's (frozen model:
        set once, here)."""
        object.__setattr__(self, "topics", self.topics.for_embedding_model(self.embedding.model))
        return self

    @model_validator(mode="after")
    def _no_default_secrets_in_production(self) -> "Settings":
        if self.environment != "production":
            return self
        if self.privacy.encrypt_content and not self.privacy.master_key_ring:
            raise ValueError("refusing to seal content in production without a master key: the data keys would be stored"
                             " in PostgreSQL as they are; set MEMORY_PRIVACY__MASTER_KEYS or MEMORY_PRIVACY__MASTER_KEY_FILE"
                             " (docs/security.md, 'Data keys at rest')")
        for entries, dev, what in ((list(self.api.api_keys), DEV_API_KEY, "API"),
                                   (self.api.admin_keys, DEV_ADMIN_KEY, "admin"),
                                   (self.api.metrics_keys, DEV_ADMIN_KEY, "metrics")):
            if key_digest(dev) in {key_digest(e) for e in entries}:
                raise ValueError(f"refusing the development {what} key {dev!r} in production")
            plain = [e for e in entries if not e.startswith(HASHED_PREFIX)]
            if plain:
                raise ValueError(
                    f"production takes {what} keys hashed at rest only: write each key as"
                    f" 'sha256:' + the hex SHA-256 of the key (printf %s KEY | sha256sum), see docs/security.md"
                )
        return self

    @property
    def pg_schema(self) -> str:
        """PostgreSQL schema holding this generation's read model."""
        return f"gen_{self.generation}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings()
