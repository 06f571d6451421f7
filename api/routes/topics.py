"""Topic memory (seed 004): each topic's stats, and a topic's full history (archive included)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel

from api.auth import Principal, conversation_user
from api.deps import ConnDep, PrincipalDep, SettingsDep
from api.routes.context import ConversationId
from api.sections.topic import TopicMessageOut, TopicStatsOut, message_out, stats_out
from projections import queries
from projections import topic_queries as tq
from domain.topics.decay import TopicConfig

router = APIRouter(prefix="/v1/conversations", tags=["topics"])


class TopicsOut(BaseModel):
    conversation_id: str
    active_topic_id: str | None
    # The newest message the topic fold has placed: the stats reflect the log up to it.
    as_of_seq: int
    topics: list[TopicStatsOut]


class TopicHistoryOut(BaseModel):
    conversation_id: str
    topic_id: str
    title: str
    archived_count: int
    active_count: int
    # Archived (decompressed) then active messages, in seq order.
    messages: list[TopicMessageOut]


async def _conversation_or_404(conn, principal: Principal, conversation_id: str, action: str) -> str:
    """The tenant, once the key may read this conversation (as its owner); 404 otherwise."""
    conversation = await queries.get_conversation(conn, principal.tenant, conversation_id)
    if conversation is None or conversation_user(principal, conversation.user_id, None, action) is None:
        raise HTTPException(404, detail=f"conversation {conversation_id!r} not found")
    return principal.tenant


@router.get("/{conversation_id}/topics", response_model=TopicsOut)
async def list_topics(
    principal: PrincipalDep,
    conn: ConnDep,
    settings: SettingsDep,
    conversation_id: str = ConversationId,
    include_evicted: bool = Query(True, description="Also list topics evicted from the working set"),
) -> TopicsOut:
    """Every topic of the conversation with seed 004's stats (memory type, half-life, priority...)."""
    tenant = await _conversation_or_404(conn, principal, conversation_id, "topics")
    state = await tq.get_topic_conversation(conn, tenant, conversation_id)
    rows = await tq.list_topics(conn, tenant, conversation_id, include_evicted=include_evicted)
    now, config = datetime.now(UTC), TopicConfig.from_settings(settings.topics)
    return TopicsOut(
        conversation_id=conversation_id,
        active_topic_id=state.active_topic_id if state else None,
        as_of_seq=state.last_seq if state else -1,
        topics=[stats_out(row, now, config) for row in rows],
    )


@router.get("/{conversation_id}/topics/{topic_id}/history", response_model=TopicHistoryOut)
async def topic_history(principal: PrincipalDep, conn: ConnDep, conversation_id: str = ConversationId,
                        topic_id: str = Path(max_length=200)) -> TopicHistoryOut:
    """The whole topic, nothing lost: its compressed archive decompressed, then its active messages."""
    tenant = await _conversation_or_404(conn, principal, conversation_id, "topic history")
    row = await tq.get_topic(conn, tenant, conversation_id, topic_id)
    if row is None:
        raise HTTPException(404, detail=f"topic {topic_id!r} not found in conversation {conversation_id!r}")
    messages = await tq.history(conn, tenant, conversation_id, topic_id)
    archived = sum(m.archived for m in messages)
    return TopicHistoryOut(
        conversation_id=conversation_id, topic_id=topic_id, title=row.title, archived_count=archived,
        active_count=len(messages) - archived, messages=[message_out(m) for m in messages],
    )
