"""GET /v1/search: memory search outside any conversation, scored and explained like the context."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from pydantic import BaseModel, Field

from api.auth import named_user
from api.deps import ConnDep, PrincipalDep
from api.sections.retrieval import ExcludedOut, RetrievedItemOut, to_out
from core.embeddings import EmbeddingError
from retrieval.lookup import SearchRequest, search_memory, user_subjects
from retrieval.search import KINDS
from retrieval.service import RetrievalConfig, common_lexemes_for, embedder_for
from schemas.envelope import IDENTIFIER

router = APIRouter(prefix="/v1", tags=["memory"])
UserHeader = Annotated[str | None, Header(alias="X-User-Id", pattern=IDENTIFIER, max_length=200,
                                          description="The acting user (the API key names the tenant)")]


class SearchOut(BaseModel):
    query: str
    user_id: str
    subject_id: str | None = Field(description="The subject searched; null: every subject of the user")
    subjects_searched: list[str | None]
    kinds: list[str]
    k: int
    since: datetime | None
    until: datetime | None
    items: list[RetrievedItemOut] = Field(description="The k best above the threshold, best first, with the"
                                                      " same score breakdown as the context's retrieved section")
    matched: int = Field(description="Items above the threshold (items holds the k best of them)")
    excluded: list[ExcludedOut] = Field(description="The best candidates under the threshold")
    excluded_total: int
    candidates: int = Field(description="Distinct items the searches returned")
    threshold: float
    embedding_model: str
    now: datetime = Field(description="Recency is measured from this time")


def storable_text(value: str | None, name: str) -> str | None:
    """PostgreSQL text cannot hold NUL: refuse it with a 422 instead of failing the query."""
    if value is not None and "\x00" in value:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail={
            "reason": "invalid_request", "message": f"{name}: contains NUL (\\u0000) at index {value.index(chr(0))}"})
    return value


def parse_kinds(kinds: str | None) -> list[str]:
    if not kinds:
        return list(KINDS)
    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = sorted(set(wanted) - set(KINDS))
    if unknown or not wanted:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail={
            "reason": "invalid_request", "message": f"kinds: unknown {', '.join(unknown) or '(none given)'};"
                                                    f" choose from {', '.join(KINDS)}"})
    return list(dict.fromkeys(wanted))


@router.get("/search", response_model=SearchOut,
            responses={503: {"description": "The embedder or PostgreSQL is unavailable"}})
async def search(
    request: Request, principal: PrincipalDep, conn: ConnDep, x_user_id: UserHeader = None,
    q: str = Query(min_length=1, max_length=8000, description="What to look for (meaning, not keywords)"),
    user_id: str | None = Query(None, pattern=IDENTIFIER, max_length=200, description="Same as X-User-Id"),
    subject_id: str | None = Query(None, pattern=IDENTIFIER, max_length=200,
                                   description="Only memory about this subject (default: every subject)"),
    kinds: str | None = Query(None, max_length=100, description="Comma-separated: fact, chunk, message (default all)"),
    since: datetime | None = Query(None, description="Only items whose source happened at or after this time"),
    until: datetime | None = Query(None, description="Only items whose source happened at or before this time"),
    k: int = Query(10, ge=1, le=50, description="How many items to return"),
) -> SearchOut:
    """The acting user's own facts, facts shared about the same subject, chunks and messages that
    match `q`, scored as in the turn-start context. Reads only: nothing is marked surfaced and no
    access count changes."""
    if x_user_id and user_id and x_user_id != user_id:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="X-User-Id and user_id name different users")
    user = named_user(principal, x_user_id or user_id, "search")
    storable_text(q, "q")
    if not q.strip():
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail={"reason": "invalid_request", "message": "q: is blank"})
    wanted = parse_kinds(kinds)
    state = request.app.state
    config = RetrievalConfig.from_settings(state.settings.retrieval)
    subjects = [subject_id] if subject_id is not None else await user_subjects(conn, principal.tenant, user)
    now = datetime.now(UTC)
    asked = SearchRequest(principal.tenant, user, " ".join(q.split()), subjects, wanted,  # type: ignore[arg-type]
                          _utc(since), _utc(until), k)
    try:
        result, matched = await search_memory(conn, asked, embedder_for(state), config, now,
                                              common=common_lexemes_for(state))
    except EmbeddingError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=f"the embedder failed: {exc}",
                            headers={"Retry-After": "1"}) from None
    out = to_out(result, config.scoring.threshold)
    return SearchOut(query=out.query, user_id=user, subject_id=subject_id, subjects_searched=subjects, kinds=wanted,
                     k=k, since=since, until=until, items=out.items, matched=matched, excluded=out.excluded,
                     excluded_total=out.excluded_total, candidates=out.candidates, threshold=out.threshold,
                     embedding_model=out.embedding_model, now=now)


def _utc(value: datetime | None) -> datetime | None:
    """A time without a zone is taken as UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
