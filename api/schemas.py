"""Response models of the read API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel


class ContextMessage(BaseModel):
    seq: int
    role: str
    content: str
    occurred_at: datetime


class SummaryOut(BaseModel):
    memory_id: int
    start_seq: int
    end_seq: int
    text: str
    prompt_version: str | None = None
    model: str | None = None


class Watermark(BaseModel):
    """What the context reflects: summary covers up to summary_end_seq, then messages verbatim."""

    last_seq: int
    summary_end_seq: int | None
    requested_min_seq: int | None
    complete: bool
    missing_seqs: list[int]


class ContextOut(BaseModel):
    conversation_id: str
    mode: Literal["raw", "caught_up", "fallback"]
    summary: SummaryOut | None
    messages: list[ContextMessage]
    watermark: Watermark
    # Relevant facts, chunks and memories packed within the token budget (seeds 001, 003).
    retrieved: Any | None = None
    # The active topic: its summary and recent messages (seed 004).
    active_topic: Any | None = None
