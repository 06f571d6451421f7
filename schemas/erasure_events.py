"""Erasure requests (issue 15, docs/lineage.md): management events on the conversation topic.

Like the fact management events (schemas/facts_events.py): seq is None and the envelope's
user_id is the acting user. The payload names what to erase; the `erasure` projector
(projections/erasure.py) deletes every read-model row derived from it."""

from __future__ import annotations

from pydantic import Field, StrictInt, StrictStr

from schemas.events import Payload
from schemas.spec import EventSpec

USER_ERASED = "user.erased"
CONVERSATION_ERASED = "conversation.erased"
ERASURE_TYPES = (USER_ERASED, CONVERSATION_ERASED)
# On the generation's memory topic, keyed by the conversation: an erasure deleted summaries of
# this conversation that mixed the erased user's words with others' (streams/rederive.py).
REDERIVE_REQUESTED = "conversation.rederive.requested"


class UserErased(Payload):
    """Forget this user: every conversation it owns or wrote in, and everything derived from it."""

    erased_user_id: StrictStr
    reason: StrictStr = ""


class ConversationErased(Payload):
    """Forget one conversation and everything derived from it."""

    erased_conversation_id: StrictStr
    reason: StrictStr = ""


class RederiveRequested(Payload):
    """Summarize this conversation again from `base_memory_id` (the newest summary kept, None:
    from the start): the summaries from `first_seq` on were deleted by erasure
    `erasure_event_id`, whose user's messages `erased_seqs` are gone from the read model."""

    erasure_event_id: StrictStr
    first_seq: StrictInt = Field(ge=0)
    erased_seqs: list[StrictInt] = Field(default_factory=list)
    base_memory_id: StrictInt | None = Field(default=None, ge=1)
    base_end_seq: StrictInt | None = Field(default=None, ge=0)


def erasure_stream(user_id: str) -> str:
    """The conversation id (Kafka key) a user's erasure is appended under."""
    return f"erasure-{user_id}"


SPECS: tuple[EventSpec, ...] = (
    EventSpec(USER_ERASED, 1, UserErased),
    EventSpec(CONVERSATION_ERASED, 1, ConversationErased),
    EventSpec(REDERIVE_REQUESTED, 1, RederiveRequested),
)
