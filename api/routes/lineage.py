"""Lineage of a memory item (docs/lineage.md): back to the messages it came from, forward to
what was derived from it, with prompt versions and models, and the served contexts that
included it. Only what the acting user may see: another user's private items are 404, and
source messages in a conversation the user does not own are withheld (counted)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Header, HTTPException, Path
from pydantic import BaseModel, Field

from api.auth import Principal, conversation_user, named_user
from api.deps import ConnDep, PrincipalDep
from domain.lineage import split_id, version_of
from projections import lineage_queries as lq
from schemas.envelope import IDENTIFIER

router = APIRouter(prefix="/v1/memories", tags=["lineage"])
Kind = Literal["summary", "chunk", "fact", "topic", "message"]


class SourceMessage(BaseModel):
    conversation_id: str
    seq: int
    event_id: str
    occurred_at: datetime
    role: str
    excerpt: str


class Derived(BaseModel):
    kind: str
    id: str
    detail: dict[str, Any] = Field(default_factory=dict, description="ranges, status, validity, relationship")
    prompt_version: str | None = None
    model: str | None = None
    embedding_model: str | None = None


class ServedIn(BaseModel):
    event_id: str
    conversation_id: str
    turn_seq: int
    served_at: datetime


class LineageOut(BaseModel):
    kind: Kind
    id: str
    item: dict[str, Any] = Field(description="The item itself: excerpt, version, range, validity")
    prompt_version: str | None = None
    model: str | None = None
    embedding_model: str | None = None
    sources: list[SourceMessage] = Field(description="The messages it came from (seq order, at most 200)")
    sources_withheld: int = Field(0, description="Source messages in conversations the caller may not see")
    via: list[Derived] = Field(default_factory=list, description="Intermediate items (a fact's chunk, a base summary)")
    derived: list[Derived] = Field(default_factory=list, description="What was derived from it")
    history: list[dict[str, Any]] = Field(default_factory=list, description="Versions: fact changes, topic compactions")
    served_in: list[ServedIn] = Field(default_factory=list, description="Recorded contexts that included it (newest 50)")


def _not_found(kind: str, item_id: str) -> HTTPException:
    return HTTPException(404, detail=f"{kind} {item_id!r} not found")


async def _owned_conversation(conn, principal: Principal, kind: str, item_id: str, conversation: str,
                              named: str | None) -> str:
    """The acting user, who must own the conversation (a service key acting as another user
    does not see this user's conversation lineage)."""
    owner = await lq.conversation_owner(conn, principal.tenant, conversation)
    user = None if owner is None else conversation_user(principal, owner, named, "lineage")
    if user is None or user != owner:
        raise _not_found(kind, item_id)
    return user


def _sources(rows: list[dict], user: str) -> tuple[list[SourceMessage], int]:
    shown = [SourceMessage(**{k: v for k, v in r.items() if k != "user_id"}) for r in rows if r["user_id"] == user]
    return shown, len(rows) - len(shown)


@router.get("/{kind}/{item_id}/lineage", response_model=LineageOut)
async def lineage(principal: PrincipalDep, conn: ConnDep, kind: Kind,
                  item_id: str = Path(max_length=420, description="chunk/fact/topic id, or CONVERSATION:N for a summary"
                                      " (memory id) or a message (seq)"),
                  x_user_id: str | None = Header(None, pattern=IDENTIFIER, max_length=200,
                                                 description="A service key names the acting user")) -> LineageOut:
    """Where an item came from and what came from it."""
    try:
        conversation, local = split_id(kind, item_id)
    except ValueError as error:
        raise HTTPException(422, detail={"reason": "invalid_request", "message": str(error)}) from None
    if kind == "fact":
        return await _fact(conn, principal, item_id, x_user_id)
    if kind == "chunk":
        return await _chunk(conn, principal, item_id, x_user_id)
    if kind == "topic":
        return await _topic(conn, principal, item_id, x_user_id)
    user = await _owned_conversation(conn, principal, kind, item_id, conversation, x_user_id)
    build = {"summary": _summary, "message": _message}[kind]
    return await build(conn, principal.tenant, user, conversation, local, item_id)


async def _summary(conn, tenant: str, user: str, conversation: str, local: str, item_id: str) -> LineageOut:
    row = await lq.summary(conn, tenant, conversation, int(local))
    if row is None:
        raise _not_found("summary", item_id)
    sources, withheld = _sources(
        await lq.messages_in_range(conn, tenant, conversation, row["start_sequence"], row["end_sequence"]), user)
    via = [] if row["base_memory_id"] is None else [Derived(kind="summary", id=f"{conversation}:{row['base_memory_id']}",
                                                              detail={"relationship": "base"})]
    served = await lq.served_with(conn, tenant, kind="summary", item_id=item_id, conversation=conversation,
                                  summary_id=row["memory_id"], user=user)
    return LineageOut(
        kind="summary", id=item_id, prompt_version=row["prompt_version"], model=row["model"],
        item={"start_seq": row["start_sequence"], "end_seq": row["end_sequence"], "status": row["status"],
              "excerpt": (row["memory_text"] or "")[:lq.EXCERPT], "version": version_of(row["memory_text"]),
              "source_event_ids": row["source_event_ids"], "completed_at": row["completed_at"]},
        sources=sources, sources_withheld=withheld, via=via, served_in=[ServedIn(**s) for s in served])


async def _chunk(conn, principal: Principal, item_id: str, named: str | None) -> LineageOut:
    tenant = principal.tenant
    row = await lq.chunk(conn, tenant, item_id)
    if row is None:
        raise _not_found("chunk", item_id)
    user = await _owned_conversation(conn, principal, "chunk", item_id, row["conversation_id"], named)
    sources, withheld = _sources(await lq.messages_in_range(
        conn, tenant, row["conversation_id"], row["message_range_start"], row["message_range_end"] - 1), user)
    facts = [f for f in await _facts_of_chunk(conn, tenant, item_id) if _fact_visible(f, user)]
    served = await lq.served_with(conn, tenant, kind="chunk", item_id=item_id, user=user)
    return LineageOut(
        kind="chunk", id=item_id, prompt_version=row["prompt_version"], model=row["model"],
        embedding_model=row["embedding_model"],
        item={"conversation_id": row["conversation_id"], "message_range": [row["message_range_start"],
              row["message_range_end"]], "excerpt": row["content"][:lq.EXCERPT], "version": version_of(row["content"]),
              "source_event_ids": row["source_event_ids"], "created_at": row["created_at"]},
        sources=sources, sources_withheld=withheld, served_in=[ServedIn(**s) for s in served],
        derived=[Derived(kind="fact", id=f["fact_id"], prompt_version=f["prompt_version"], model=f["model"],
                         embedding_model=f["embedding_model"], detail=_validity(f)) for f in facts])


async def _facts_of_chunk(conn, tenant: str, chunk_id: str) -> list[dict]:
    return await lq._all(conn, "SELECT fact_id, owner_user_id, visibility, extracted_by AS model, prompt_version,"
                         " embedding_model, valid_to, deleted_at FROM facts WHERE tenant_id = %s AND source_chunk_id = %s"
                         " ORDER BY fact_id", (tenant, chunk_id))


def _fact_visible(row: dict, user: str) -> bool:
    return row["deleted_at"] is None and (row["owner_user_id"] == user or row["visibility"] == "shared")


def _validity(row: dict) -> dict[str, Any]:
    return {"superseded": row.get("valid_to") is not None, "deleted": row.get("deleted_at") is not None}


async def _fact(conn, principal: Principal, item_id: str, named: str | None) -> LineageOut:
    tenant = principal.tenant
    row = await lq.fact(conn, tenant, item_id)
    # Like a conversation's items: a service key that names nobody acts as the owner.
    user = conversation_user(principal, row["owner_user_id"], named, "lineage") if row and named is None \
        and principal.user is None else named_user(principal, named, "lineage")
    if row is None or user is None or not _fact_visible(row, user):
        raise _not_found("fact", item_id)
    sources, withheld = _sources(await lq.messages_by_event(conn, tenant, row["source_event_ids"]), user)
    via = []
    if row["source_chunk_id"]:
        source = await lq.chunk(conn, tenant, row["source_chunk_id"])
        if source is not None and source["user_id"] == user:
            via.append(Derived(kind="chunk", id=source["chunk_id"], prompt_version=source["prompt_version"],
                               model=source["model"], embedding_model=source["embedding_model"],
                               detail={"message_range": [source["message_range_start"], source["message_range_end"]]}))
    derived = []
    for link in await lq.fact_links(conn, item_id):
        other = link["to_fact_id"] if link["from_fact_id"] == item_id else link["from_fact_id"]
        other_row = await lq.fact(conn, tenant, other)
        if other_row is None or not _fact_visible(other_row, user):
            continue
        target = via if link["from_fact_id"] == item_id else derived  # it supersedes X: X came before it
        target.append(Derived(kind="fact", id=other, model=other_row["model"], prompt_version=other_row["prompt_version"],
                              detail={"relationship": link["relationship"],
                                      "direction": "this fact -> it" if target is via else "it -> this fact"}))
    history = [{"change": h["change"], "at": h["changed_at"], "event_id": h["event_id"],
                "old_version": version_of(h["old_content"]) if h["old_content"] is not None else None,
                "new_version": version_of(h["new_content"]) if h["new_content"] is not None else None,
                "detail": h["detail"]} for h in await lq.fact_history(conn, item_id) if h["change"] != "decision"]
    served = await lq.served_with(conn, tenant, kind="fact", item_id=item_id, user=user)
    return LineageOut(
        kind="fact", id=item_id, prompt_version=row["prompt_version"], model=row["model"],
        embedding_model=row["embedding_model"], sources=sources, sources_withheld=withheld, via=via,
        derived=derived, history=history, served_in=[ServedIn(**s) for s in served],
        item={"excerpt": row["content"][:lq.EXCERPT], "version": version_of(row["content"]),
              "owner_user_id": row["owner_user_id"], "visibility": row["visibility"],
              "source_conversation_id": row["source_conversation_id"], "source_chunk_id": row["source_chunk_id"],
              "valid_from": row["valid_from"], "valid_to": row["valid_to"]})


async def _topic(conn, principal: Principal, item_id: str, named: str | None) -> LineageOut:
    tenant, local = principal.tenant, item_id
    row = await lq.topic(conn, tenant, item_id)
    if row is None:
        raise _not_found("topic", item_id)
    conversation = row["conversation_id"]
    user = await _owned_conversation(conn, principal, "topic", item_id, conversation, named)
    seqs = await lq.topic_seqs(conn, tenant, conversation, local)
    sources, withheld = _sources(await lq.messages_by_seqs(conn, tenant, conversation, seqs), user)
    history = [{"change": "compacted", "upto_seq": c["upto_seq"], "archived_seqs": c["archived_seqs"],
                "version": version_of(c["summary"]), "prompt_version": c["prompt_version"], "model": c["model"],
                "event_id": c["event_id"], "at": c["projected_at"]}
               for c in await lq.topic_compactions(conn, tenant, conversation, local)]
    served = await lq.served_with(conn, tenant, kind="topic", item_id=item_id, conversation=conversation,
                                  topic_id=local, user=user)
    return LineageOut(
        kind="topic", id=item_id, prompt_version=row["prompt_version"], model=row["model"],
        item={"conversation_id": conversation, "title": row["title"], "first_seq": row["first_seq"], "summary_upto_seq": row["summary_upto_seq"],
              "message_seqs": seqs, "created_event_id": row["created_event_id"]},
        sources=sources, sources_withheld=withheld, history=history, served_in=[ServedIn(**s) for s in served])


async def _message(conn, tenant: str, user: str, conversation: str, local: str, item_id: str) -> LineageOut:
    seq = int(local)
    row = await lq.message(conn, tenant, conversation, seq)
    if row is None:
        raise _not_found("message", item_id)
    found = await lq.derived_from_message(conn, tenant, conversation, seq, row["event_id"])
    derived = [Derived(kind="summary", id=f"{conversation}:{s['memory_id']}", prompt_version=s["prompt_version"],
                       model=s["model"], detail={"start_seq": s["start_sequence"], "end_seq": s["end_sequence"],
                                                 "status": s["status"]}) for s in found["summary"]]
    derived += [Derived(kind="chunk", id=c["chunk_id"], prompt_version=c["prompt_version"], model=c["model"],
                        embedding_model=c["embedding_model"],
                        detail={"message_range": [c["message_range_start"], c["message_range_end"]]})
                for c in found["chunk"]]
    derived += [Derived(kind="fact", id=f["fact_id"], prompt_version=f["prompt_version"], model=f["model"],
                        embedding_model=f["embedding_model"], detail=_validity(f))
                for f in found["fact"] if _fact_visible(f, user)]
    derived += [Derived(kind="topic", id=t["topic_id"], prompt_version=t["prompt_version"],
                        model=t["model"], detail={"title": t["title"], "matched": t["matched"],
                                                  "similarity": t["similarity"],
                                                  "archived_by_compaction_upto": t["archived_by_compaction_upto"]})
                for t in found["topic"]]
    derived += [Derived(kind="message_embedding", id=item_id, embedding_model=e["embedding_model"])
                for e in found["embedding"]]
    served = await lq.served_with(conn, tenant, kind="message", item_id=item_id, conversation=conversation,
                                  gap_seq=seq, user=user)
    source = SourceMessage(**{k: v for k, v in row.items() if k != "user_id"})
    return LineageOut(kind="message", id=item_id, item={"excerpt": row["excerpt"], "role": row["role"]},
                      sources=[source], derived=derived, served_in=[ServedIn(**s) for s in served])
