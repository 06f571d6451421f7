"""Events of the facts, chunks and semantic-memory system (seeds 001, 003)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from schemas.events import Payload
from schemas.spec import EventSpec

# Derived (memory topic of a generation).
CHUNK_REQUESTED = "chunk.requested"
CHUNK_RECORDED = "chunk.recorded"
CHUNK_FAILED = "chunk.failed"
CHUNK_SKIPPED = "chunk.skipped"
CHUNK_TICKED = "chunk.ticked"
# Management (conversation topic, the truth): seq is None, envelope.user_id is the acting user.
FACT_EDITED = "fact.edited"
FACT_VISIBILITY_CHANGED = "fact.visibility_changed"
FACT_DELETED = "fact.deleted"
MANAGEMENT_TYPES = (FACT_EDITED, FACT_VISIBILITY_CHANGED, FACT_DELETED)
# A memory stored by hand (POST /v1/memories, the CLI, the MCP tool): conversation topic too,
# keyed by the owner's "memories-<user>" stream; projected like an extracted fact (dedup/merge).
MEMORY_STORED = "memory.stored"

Visibility = Literal["private", "shared"]


class Vector(Payload):
    """An embedding with the model that made it; values are unit length."""

    model: StrictStr = Field(min_length=1)
    dimensions: StrictInt = Field(ge=1)
    values: list[float]

    @model_validator(mode="after")
    def _length_matches(self) -> "Vector":
        if len(self.values) != self.dimensions:
            raise ValueError(f"{len(self.values)} values for {self.dimensions} dimensions")
        return self


class ChunkRequested(Payload):
    """The chunk fold decided to summarize seqs [start_seq, end_seq_exclusive) and extract facts."""

    start_seq: StrictInt = Field(ge=0)
    end_seq_exclusive: StrictInt = Field(ge=1)
    attempt: StrictInt = Field(default=1, ge=1)
    prompt_version: StrictStr
    model: StrictStr


class GateVerdict(Payload):
    """Seed 001's cheap first tier: was the chunk worth the extractor?"""

    worth_remembering: StrictBool
    reason: StrictStr = ""
    method: Literal["llm", "heuristic", "off", "llm-failed-open"]
    model: StrictStr | None = None


class RecordedFact(Payload):
    """One extracted fact; its id is deterministic (tenant, conversation, range, normalised text)."""

    fact_id: StrictStr
    category: StrictStr
    memory_type: StrictStr = "fact"
    content: StrictStr = Field(min_length=1)
    importance: StrictInt = Field(default=3, ge=1, le=5)
    tags: list[StrictStr] = Field(default_factory=list)
    embedding: Vector
    # The extractor's judgement against a related existing memory it was shown (seed 001):
    # "duplicate" (merge), "contradicts" (an update: supersede) or "elaborates", and that
    # memory's fact id. Absent: the projector's similarity rules decide alone.
    relation: Literal["duplicate", "contradicts", "elaborates"] | None = None
    target_fact_id: StrictStr | None = None


class ChunkRecorded(Payload):
    """A chunk's summary and its facts, from one extraction: projected in one transaction."""

    chunk_id: StrictStr
    start_seq: StrictInt = Field(ge=0)
    end_seq_exclusive: StrictInt = Field(ge=1)
    attempt: StrictInt = Field(default=1, ge=1)
    owner_user_id: StrictStr
    subject_id: StrictStr | None = None
    summary: StrictStr = Field(min_length=1)
    embedding: Vector
    facts: list[RecordedFact] = Field(default_factory=list)
    gate: GateVerdict
    # "llm", or the offline rules' name (never presented as LLM quality).
    extractor: StrictStr
    model: StrictStr
    prompt_version: StrictStr
    source_event_ids: list[StrictStr] = Field(default_factory=list)
    # When the newest message of the range was written: facts are valid from then.
    observed_at: datetime
    # When the oldest message of the range was written (absent in events recorded before it
    # existed): with observed_at, the chunk's conversation_chunks.occurred_start/_end.
    occurred_start: datetime | None = None
    generation_time_ms: StrictInt = Field(ge=0)
    remapped_categories: list[StrictStr] = Field(default_factory=list)


class ChunkFailed(Payload):
    """The extraction stage gave up on one attempt; the fold backs off and retries."""

    start_seq: StrictInt = Field(ge=0)
    end_seq_exclusive: StrictInt = Field(ge=1)
    attempt: StrictInt = Field(default=1, ge=1)
    error: StrictStr
    retryable: StrictBool = True
    prompt_version: StrictStr
    model: StrictStr


class ChunkSkipped(Payload):
    """After `attempts` failures the fold gave the range up so later messages still get chunked."""

    start_seq: StrictInt = Field(ge=0)
    end_seq_exclusive: StrictInt = Field(ge=1)
    attempts: StrictInt = Field(ge=1)
    error: StrictStr


class ChunkTicked(Payload):
    """A timer asked the chunk fold to look for timed-out or backed-off requests."""

    reason: StrictStr = "timeout-scan"


class FactManaged(Payload):
    """Common part of an owner's decision: which fact, whose, and what it said then."""

    fact_id: StrictStr
    owner_user_id: StrictStr
    subject_id: StrictStr | None = None
    content_snapshot: StrictStr
    # The stored vector of the snapshot: lets a replay match a re-extracted fact by meaning.
    snapshot_embedding: Vector | None = None


class FactEdited(FactManaged):
    """The owner rewrote the fact's content."""

    new_content: StrictStr = Field(min_length=1)
    new_embedding: Vector | None = None


class FactVisibilityChanged(FactManaged):
    """The owner shared the fact with the subject's other users, or made it private again."""

    visibility: Visibility


class FactDeleted(FactManaged):
    """The owner deleted the fact (hidden everywhere; history kept)."""


class MemoryStored(Payload):
    """A user stored a memory by hand. The API embeds it, so every replay gets the same vector
    and the same dedup decision; `fact_id` is derived from the event id (domain/facts/ids.py)."""

    fact_id: StrictStr
    owner_user_id: StrictStr
    subject_id: StrictStr | None = None
    category: StrictStr = Field(min_length=1, max_length=100)
    memory_type: StrictStr = Field(default="fact", min_length=1, max_length=100)
    content: StrictStr = Field(min_length=1)
    importance: StrictInt = Field(default=3, ge=1, le=5)
    tags: list[StrictStr] = Field(default_factory=list)
    visibility: Visibility = "private"
    embedding: Vector


SPECS: tuple[EventSpec, ...] = (
    EventSpec(CHUNK_REQUESTED, 1, ChunkRequested),
    EventSpec(CHUNK_RECORDED, 1, ChunkRecorded),
    EventSpec(CHUNK_FAILED, 1, ChunkFailed),
    EventSpec(CHUNK_SKIPPED, 1, ChunkSkipped),
    EventSpec(CHUNK_TICKED, 1, ChunkTicked),
    EventSpec(FACT_EDITED, 1, FactEdited),
    EventSpec(FACT_VISIBILITY_CHANGED, 1, FactVisibilityChanged),
    EventSpec(FACT_DELETED, 1, FactDeleted),
    EventSpec(MEMORY_STORED, 1, MemoryStored),
)
"""Every event type: its stable name, current schema version, payload model and upcasters."""
