"""Prometheus metrics shared by the workers and the API."""

from __future__ import annotations

import hashlib
import os
import time

from prometheus_client import Counter, Gauge, Histogram

PROJECTED = Counter("memory_projected_events_total", "Records applied by a projector", ["projector"])
PROJECTOR_TRANSACTIONS = Counter(
    "memory_projector_transactions_total", "PostgreSQL transactions the projectors committed (rows + offsets)",
    ["projectors"],
)  # projectors: one name, or the names of a group applied in one transaction joined by '+'
DEAD_LETTERS = Counter("memory_dead_letters_total", "Records sent to the dead-letter topic", ["stage", "reason"])
SKIPPED_INVALID = Counter(
    "memory_records_skipped_total", "Invalid records a stream agent or stage skipped (a projector dead-letters them)",
    ["reason"],
)
DUPLICATES = Counter("memory_duplicate_events_total", "Redelivered events ignored", ["projector"])
SEQ_CONFLICTS = Counter("memory_seq_conflicts_total", "Different events claiming one (conversation, seq)")
SEQ_GAPS = Counter("memory_seq_gaps_total", "Missing seq numbers observed in conversations")
INGESTED = Counter("memory_ingested_messages_total", "Messages appended through the HTTP ingest API")
LLM_LATENCY = Histogram(
    "memory_llm_latency_seconds", "Summarizer call latency", ["operation", "outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
SUMMARIES_IN_FLIGHT = Gauge("memory_summaries_in_flight", "Summary requests being computed by this worker")
SUMMARY_FAILURES = Counter("memory_summary_failures_total", "Summary attempts that failed", ["kind"])
CONSUMER_LAG = Gauge("memory_consumer_lag_records", "Records behind the log end", ["consumer", "partition"])
STAGE_ERRORS = Counter("memory_stage_errors_total", "Unexpected stage exceptions (retried, then dropped)", ["stage"])
STAGE_IN_FLIGHT = Gauge("memory_stage_in_flight", "Requests a stage is working on", ["stage"])
WINDOWS_AWAITING_SUMMARY = Gauge("memory_windows_awaiting_summary", "Conversations with a summary request in flight")
EMBEDDING_CACHE = Counter(
    "memory_embedding_cache_texts_total", "Document texts looked up in the embedding cache", ["outcome"],
)  # outcome: hit, miss (embedded by the model), error (cache unreachable: embedded uncached)
EMBEDDING_MODEL_CALLS = Counter(
    "memory_embedding_model_calls_total", "Calls to the embedding model", ["kind"],
)  # kind: documents, query
EMBEDDING_MODEL_FAILURES = Counter(
    "memory_embedding_model_failures_total", "Calls to the embedding model that raised", ["kind"],
)  # kind: documents, query
CONTEXT_LATENCY = Histogram(
    "memory_context_latency_seconds", "Turn-start context requests answered, from the request to the answer",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Which deployment a process belongs to: the dashboard shows a worker's metrics only when they
# carry its own deployment's id (api/ui/worker_metrics.py), never another one's on the same port.
DEPLOYMENT = Gauge("memory_deployment_info", "The deployment this process belongs to (value 1)",
                   ["deployment", "topic_prefix", "generation"])


def deployment_id(bootstrap_servers: str, topic_prefix: str) -> str:
    """A deployment is its Kafka cluster and topic prefix (every topic and group it uses)."""
    return hashlib.sha256(f"{bootstrap_servers}|{topic_prefix}".encode()).hexdigest()[:12]


EMBEDDING_MODEL_TEXTS = Counter("memory_embedding_model_texts_total", "Texts the embedding model embedded")
EMBEDDING_MODELS_LOADED = Gauge(
    "memory_embedding_models_loaded", "Embedding models (each behind its queue) alive in the process")
EMBEDDING_QUEUE_BATCHES = Counter(
    "memory_embedding_queue_batches_total", "Batches the embedding queue ran through the model")
EMBEDDING_QUEUE_TEXTS = Counter(
    "memory_embedding_queue_texts_total", "Texts the embedding queue ran through the model (documents and queries)")
EMBEDDING_QUEUE_CPU = Counter(
    "memory_embedding_queue_cpu_seconds_total",
    "CPU seconds of the embedding queue's model thread in the model (exact with one intra-op thread)")
MODEL_CPU = Counter(
    "memory_model_cpu_seconds_total",
    "Process CPU seconds while at least one model call was in flight (an upper bound: the event loop keeps"
    " working meanwhile)", ["model"],
)


class ModelClock:
    """Process CPU time while at least one model call is in flight (overlapping calls count once)."""

    def __init__(self, label: str) -> None:
        self.label, self._in_flight, self._started = label, 0, 0.0

    def __enter__(self) -> "ModelClock":
        if self._in_flight == 0:
            self._started = time.process_time()
        self._in_flight += 1
        return self

    def __exit__(self, *exc) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            MODEL_CPU.labels(self.label).inc(time.process_time() - self._started)


EMBEDDING_CLOCK = ModelClock("embedding")  # shared by every embedder of the process
LLM_CLOCK = ModelClock("llm")  # the OpenAI-compatible client's calls (request building, HTTP, parsing)


def cpu_split() -> dict[str, float]:
    """Process CPU so far and the part spent while model calls were in flight (bench/system_bench.py)."""
    times = os.times()
    split = {"process_cpu_s": round(times.user + times.system, 3)}
    for label in ("embedding", "llm"):
        split[f"{label}_cpu_s"] = round(MODEL_CPU.labels(label)._value.get(), 3)
    split["embedded_texts"] = EMBEDDING_MODEL_TEXTS._value.get()
    split["embedding_queue_cpu_s"] = round(EMBEDDING_QUEUE_CPU._value.get(), 3)
    split["embedding_queue_texts"] = EMBEDDING_QUEUE_TEXTS._value.get()
    split["embedding_queue_batches"] = EMBEDDING_QUEUE_BATCHES._value.get()
    for outcome in ("hit", "miss", "error"):
        split[f"embedding_cache_{outcome}"] = EMBEDDING_CACHE.labels(outcome)._value.get()
    split["projector_transactions"] = sum(
        sample.value for metric in PROJECTOR_TRANSACTIONS.collect() for sample in metric.samples
        if sample.name.endswith("_total"))
    return split
