"""One typed settings object, built from MEMORY_* environment variables on demand."""

from __future__ import annotations

import re
from functools import lru_cache
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
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
    # Longest a stream agent's fetch waits at the broker for new records (faust's own is 1.5 s,
    # which adds up to that much latency per hop: streams/kafka_transport.py).
    fetch_max_wait_ms: int = Field(default=50, ge=1, le=10_000)

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


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8080
    # API key -> tenant id. Every read and write is scoped to the key's tenant.
    api_keys: dict[str, str] = Field(default_factory=lambda: {"dev-key": "demo"})
    # Keys for the operator endpoints (/v1/admin: generations and replay progress).
    admin_keys: list[str] = Field(default_factory=lambda: ["dev-admin-key"])
    # How long /context may wait for the projection to reach ?min_seq.
    max_wait_ms: int = Field(default=2000, ge=0)


class LimitsSettings(BaseModel):
    max_content_chars: int = Field(default=32_000, ge=1)
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
    # Batch replay (memory_agent/batch_replay.py): processes sharing the partitions.
    replay_batch_processes: int = Field(default=2, ge=1)


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
    chunk_facts_prompt_version: str = "chunk-facts-v1"
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
    provider: Literal["local", "openai"] = "local"
    base_url: str | None = None
    api_key: SecretStr = SecretStr("not-needed")
    model: str = "all-MiniLM-L6-v2"
    dimensions: int = 384
    # None: use the known prefixes of `model` (nomic: "search_query: "/"search_document: ");
    # a string (even "") overrides them.
    query_prefix: str | None = None
    document_prefix: str | None = None
    batch_size: int = Field(default=32, ge=1)
    # Local ONNX model: intra-op threads (0 = onnxruntime's default, one per core).
    intra_op_threads: int = Field(default=0, ge=0)
    max_length: int = Field(default=256, ge=8, le=512)
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
    # How long the extraction stage waits for the chunk's messages to be projected.
    inputs_wait_s: float = Field(default=30.0, gt=0)


class RetrievalSettings(BaseModel):
    """Turn-start retrieval (seeds 001, 003): hybrid search, relevance score, threshold."""

    # final = similarity x importance weight x recency weight must be strictly above this.
    # Seed 001 says 0.45 for nomic-embed-text; all-MiniLM-L6-v2's cosines run lower
    # (measured on tests/support/labelled_set.py, see docs/retrieval.md).
    threshold: float = Field(default=0.25, ge=0)
    importance_scale: float = Field(default=3.0, gt=0)
    fresh_days: float = Field(default=7.0, ge=0)
    stale_days: float = Field(default=90.0, gt=0)
    # Seed 001 says 0.5; long conversations ask about months-old events (docs/retrieval.md).
    stale_weight: float = Field(default=0.8, ge=0, le=1)
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
    # Hybrid relevance: similarity = cosine + keyword_weight x keyword score, the IDF-weighted
    # share of the query's words an item contains (0..1, see docs/retrieval.md).
    keyword_weight: float = Field(default=0.5, ge=0)
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
    # The earlier messages' share of the query vector (the current message weighs 1): they
    # resolve follow-ups without drowning the question in small talk.
    context_weight: float = Field(default=0.3, ge=0, le=1)
    # Items with fewer distinct words than this ("Good to know.") have their similarity scaled
    # by sqrt(words / this): a name carries MiniLM's vector of a short reply (0: off).
    informative_lexemes: int = Field(default=6, ge=0)
    # The message-index projector embeds every user/assistant message (the log is memory).
    index_messages: bool = True


class TopicSettings(BaseModel):
    """Seed 004's topic memory: matching, compaction, decay, plus the agent's own limits."""

    max_topics: int = Field(default=20, ge=1)
    # A user message joins its best topic when cosine > this. Model-dependent: seed 004's
    # 0.7 suits models whose same-subject cosines sit high; see docs/topics.md for MiniLM.
    similarity_threshold: float = Field(default=0.7, ge=-1.0, le=1.0)
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
    # Messages waiting behind an embedding, per conversation, before the oldest is given up.
    max_waiting_messages: int = Field(default=200, ge=1)
    summary_prompt_version: str = "topic-summary-v1"
    # Turn-start context: wait this long for the topic fold to reach the current message,
    # and bring back at most this many archived messages on a restore.
    context_wait_ms: int = Field(default=500, ge=0)
    restore_max_messages: int = Field(default=200, ge=0)

    @model_validator(mode="after")
    def _keep_fewer_than_the_limit(self) -> "TopicSettings":
        if self.recent_message_keep >= self.max_messages_per_topic:
            raise ValueError("recent_message_keep must be smaller than max_messages_per_topic")
        if self.max_half_life_seconds < self.base_half_life_seconds:
            raise ValueError("max_half_life_seconds must be at least base_half_life_seconds")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMORY_", env_nested_delimiter="__", frozen=True, extra="ignore"
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
    # start of the log) or "batch" (memory_agent/batch_replay.py, window system only).
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

    @field_validator("generation")
    @classmethod
    def _generation_is_a_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("generation must match [a-z0-9][a-z0-9_]{0,40}")
        return value

    @model_validator(mode="after")
    def _no_default_secrets_in_production(self) -> "Settings":
        if self.environment == "production" and "dev-key" in self.api.api_keys:
            raise ValueError("refusing the development API key 'dev-key' in production")
        if self.environment == "production" and "dev-admin-key" in self.api.admin_keys:
            raise ValueError("refusing the development admin key 'dev-admin-key' in production")
        return self

    @property
    def pg_schema(self) -> str:
        """PostgreSQL schema holding this generation's read model."""
        return f"gen_{self.generation}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings()
