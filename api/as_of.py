"""`GET /v1/conversations/{id}/context?as_of_seq=N`: the context of turn N rebuilt from the
read model's history (docs/lineage.md) and compared with the one recorded when it was served.

The moment rebuilt is the position of the generation's projection clock recorded when the
context was served, or (no record) the position at which message N was projected; rows are
compared by position, not by wall-clock time (a record without a position: by time).
Summary, gap, watermark and active topic are rebuilt from that history; retrieved items are
the recorded ones, each resolved to the content it had then (retrieval is not re-ranked)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from pydantic import BaseModel, Field

from api.schemas import ContextMessage, ContextOut, SummaryOut, Watermark
from retrieval.request import ContextRequest
from domain.lineage import differences, version_of
from projections import as_of_queries as aq
from projections import lineage_queries as lq
from streams.window.context import MemoryRow, Message, assemble_context


class AsOfOut(BaseModel):
    turn_seq: int
    at: datetime = Field(description="The moment rebuilt: the recorded serving time, else when message N arrived")
    position: int | None = Field(None, description="That moment on the generation's projection clock, which the"
                                 " rebuild compares (None: a record without one; rows compared by time)")
    recorded_event_id: str | None = Field(None, description="The context.served event compared with")
    recorded_at: datetime | None = None
    matches: bool | None = Field(None, description="Rebuilt == recorded (None: nothing was recorded)")
    differences: list[str] = Field(default_factory=list)
    recorded: dict[str, Any] | None = Field(None, description="The recorded context.served payload")
    note: str | None = Field(None, description="Why the rebuild may show less than was served (a later replay)")


async def context_as_of(conn: psycopg.AsyncConnection, request: ContextRequest, turn: int, app_state: Any) -> ContextOut:
    tenant, conversation = request.tenant_id, request.conversation.conversation_id
    recorded = next((r for r in await lq.served_at_turn(conn, tenant, conversation, turn)
                     if r["user_id"] == request.user_id), None)
    generation, now_position = await projection_clock(conn)
    at = await _moment(conn, tenant, conversation, turn, recorded, generation, now_position is not None) \
        or aq.Moment(request.now, now_position)
    limits = app_state.settings.window
    memory = await aq.memory_rows(conn, tenant, conversation, at)
    rows = [MemoryRow(m["memory_id"], m["start_sequence"], m["end_sequence"], m["base_memory_id"], m["status"],
                      m["memory_text"]) for m in memory]
    after = max((r.end_seq for r in rows if r.status == "completed" and r.end_seq < turn), default=-1)
    messages = await aq.newest_messages(conn, tenant, conversation, after_seq=after, before_seq=turn, at=at,
                                        limit=limits.context_max_gap_messages + 1)
    assembled = assemble_context(rows, [Message(m["seq"], m["role"], m["content"]) for m in messages], turn,
                                 max_messages=limits.context_max_gap_messages, max_bytes=limits.context_max_gap_bytes)
    last = await aq.last_seq(conn, tenant, conversation, at)
    missing = await aq.missing_seqs(conn, tenant, conversation, after, min(last, turn - 1), at)
    summary = None
    if assembled.summary is not None:
        m = next(m for m in memory if m["memory_id"] == assembled.summary.memory_id)
        summary = SummaryOut(memory_id=m["memory_id"], start_seq=m["start_sequence"], end_seq=m["end_sequence"],
                             text=m["memory_text"] or "", prompt_version=m["prompt_version"], model=m["model"])
    occurred = {m["seq"]: m["occurred_at"] for m in messages}
    payload = recorded["payload"] if recorded else None
    retrieved = await _retrieved_then(conn, tenant, payload, at)
    topic = await aq.active_topic(conn, tenant, conversation, turn, at)
    rebuilt = {"summary": summary and {"memory_id": summary.memory_id, "start_seq": summary.start_seq,
                                       "end_seq": summary.end_seq},
               "gap_seqs": [m.seq for m in assembled.gap], "retrieved": retrieved and retrieved["items"],
               "active_topic": topic}
    found = differences(payload, rebuilt) if payload else []
    omitted = assembled.omitted
    rebuilt_later = None if at.position is not None else \
        await aq.generation_built_after(conn, app_state.settings.kafka.topic_prefix, at.at)
    note = None if rebuilt_later is None else (
        f"memory was rebuilt by generation {rebuilt_later['name']!r} on {rebuilt_later['created_at']:%Y-%m-%d %H:%M},"
        " after this turn: its rows carry later processing times, so this rebuild shows less than was served")
    return ContextOut(
        conversation_id=conversation, mode=assembled.mode, summary=summary,
        messages=[ContextMessage(seq=m.seq, role=m.role, content=m.content, occurred_at=occurred[m.seq])
                  for m in assembled.gap],
        watermark=Watermark(last_seq=last, summary_end_seq=assembled.summary_end_seq, requested_min_seq=None,
                            complete=not missing, missing_seqs=missing,
                            verbatim_from_seq=assembled.gap[0].seq if assembled.gap else None,
                            gap_omitted_from_seq=omitted[0] if omitted else None,
                            gap_omitted_to_seq=omitted[1] if omitted else None),
        retrieved=retrieved, active_topic=topic,
        as_of=AsOfOut(turn_seq=turn, at=at.at, position=at.position, recorded_event_id=recorded["event_id"] if recorded else None,
                      recorded_at=recorded["served_at"] if recorded else None,
                      matches=None if payload is None else not found, differences=found, recorded=payload,
                      note=note),
    )


async def projection_clock(conn: psycopg.AsyncConnection) -> tuple[str, int | None]:
    """(generation, position) of the projection clock: read as a context is served, recorded with it."""
    return await aq.clock(conn)


async def _moment(conn, tenant: str, conversation: str, turn: int, recorded: dict | None,
                  generation: str, clocked: bool) -> aq.Moment | None:
    """The recorded read's clock position when this generation recorded one; a record without
    one (made before the clock, or read from another generation) compares by time; no record:
    when message N was projected."""
    if recorded is None:
        return await aq.message_moment(conn, tenant, conversation, turn, positions=clocked)
    clock = (recorded["payload"] or {}).get("clock") or {}
    same = clocked and clock.get("generation") == generation
    return aq.Moment(recorded["served_at"], clock.get("position") if same else None)


async def _retrieved_then(conn, tenant: str, payload: dict | None, at: aq.Moment) -> dict | None:
    """The recorded retrieved items with the content each had at `at` (an item that was not in
    memory then is left out, and the comparison names it)."""
    if not payload or payload.get("retrieved") is None:
        return None
    resolve = {"fact": aq.fact_at, "chunk": aq.chunk_at, "message": aq.message_at}
    items = []
    for item in payload["retrieved"]:
        lookup = resolve.get(item["kind"])
        content = None if lookup is None else await lookup(conn, tenant, item["id"], at)
        if content is not None:
            items.append({"kind": item["kind"], "id": item["id"], "version": version_of(content), "content": content,
                          "score": item.get("score"), "tokens": item.get("tokens")})
    return {"items": items, "text": "\n".join(i["content"] for i in items),
            "note": "the recorded items, each with the content it had then (not re-ranked)"}
