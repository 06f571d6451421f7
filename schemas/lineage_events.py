"""What the API served at a turn (docs/lineage.md): recorded on its own topic, projected, replayable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, StrictFloat, StrictInt, StrictStr

from schemas.events import Payload
from schemas.spec import EventSpec

CONTEXT_SERVED = "context.served"


class ServedSummary(Payload):
    memory_id: StrictInt = Field(ge=1)
    start_seq: StrictInt = Field(ge=0)
    end_seq: StrictInt = Field(ge=0)
    prompt_version: StrictStr | None = None
    model: StrictStr | None = None


class ServedItem(Payload):
    """A retrieved item: `version` is the digest of the content it had (domain/lineage.py)."""

    kind: StrictStr
    id: StrictStr
    version: StrictStr
    score: StrictFloat | None = None
    tokens: StrictInt | None = None


class ServedTopic(Payload):
    topic_id: StrictStr
    summary_upto_seq: StrictInt
    message_seqs: list[StrictInt] = Field(default_factory=list)
    restored: bool = False


class ServedClock(Payload):
    """The generation's projection clock when the read began (projections/as_of_queries.py)."""

    generation: StrictStr
    position: StrictInt = Field(ge=0)


class ContextServed(Payload):
    """The turn-start context the API returned for turn `turn_seq` (the envelope's user is the
    acting user, its occurred_at the time the read started)."""

    turn_seq: StrictInt = Field(ge=0)
    before_seq: StrictInt | None = None
    query: StrictStr | None = None
    budget_tokens: StrictInt = Field(ge=0)
    mode: StrictStr
    summary: ServedSummary | None = None
    gap_seqs: list[StrictInt] = Field(default_factory=list)
    retrieved: list[ServedItem] | None = None
    retrieval_error: StrictStr | None = None
    active_topic: ServedTopic | None = None
    watermark: dict[str, Any] = Field(default_factory=dict)
    served_at: datetime
    clock: ServedClock | None = None  # absent in records made before the clock (compared by time)


SPECS = (EventSpec(CONTEXT_SERVED, 1, ContextServed),)
