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
    # The gap is bounded (MEMORY_WINDOW__CONTEXT_MAX_GAP_MESSAGES / _BYTES): `messages` starts
    # at verbatim_from_seq; the older gap messages gap_omitted_from_seq..gap_omitted_to_seq
    # (gap_omitted_count of them) were left out. None/0 when nothing was left out.
    verbatim_from_seq: int | None = None
    gap_omitted_from_seq: int | None = None
    gap_omitted_to_seq: int | None = None
    gap_omitted_count: int = 0


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
    # Only with ?as_of_seq=N: which moment was rebuilt and how it compares (docs/lineage.md).
    as_of: Any | None = None
