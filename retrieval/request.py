"""What a turn-start context request asks for, as the sections see it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class ConversationRow(Protocol):
    """The conversation as the read model holds it (projections.queries.ConversationRow)."""

    tenant_id: str
    conversation_id: str
    user_id: str
    subject_id: str | None
    last_seq: int


@dataclass(frozen=True)
class ContextRequest:
    conversation: ConversationRow
    # Whose memory: defaults to the conversation's user and subject.
    user_id: str
    subject_id: str | None
    # The current message text (the retrieval query), if the caller sent it.
    query: str | None
    before_seq: int | None
    # Token budget for retrieved items (facts, chunks, memories).
    budget_tokens: int
    now: datetime

    @property
    def tenant_id(self) -> str:
        return self.conversation.tenant_id
