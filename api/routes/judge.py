"""Operator endpoints of the judgement (issue 26): judge a generation on the turns another served,
the last judgement, and the gated activation (X-Admin-Key)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Query, status

from api.routes.admin import AdminDep
from api import judging
from projections import progress as replays
from projections import generations as gens
from runtime import judge as R

router = APIRouter(prefix="/v1/admin/generations", tags=["admin"])
MAX_SAMPLE = 2000  # an HTTP request judges a sample; the CLI judges every turn


@router.get("/judgements/last")
async def last_judgement(settings: AdminDep, b: str | None = None, a: str | None = None) -> dict | None:
    """The newest stored judgement (of B, against A, when given): the overall figures."""
    return await asyncio.to_thread(judging.last_judgement, settings, b, a)


@router.post("/{b}/judge", responses={404: {"description": "No such generation (A or B)"}})
async def judge(settings: AdminDep, b: str, against: str = Query(..., description="Generation A: its served turns"),
                sample: int = Query(200, ge=1, le=MAX_SAMPLE), horizon: int = Query(20, ge=1, le=200),
                margin: float = Query(judging.DEFAULT_MARGIN, ge=0),
                cpu_share: float = Query(0.25, ge=0.05, le=1.0)) -> dict:
    """Judge B on a sample of A's recorded turns; stored as the last judgement. Paced to
    `cpu_share` of one core, so it shares the API process with the live read path."""
    options = R.Options(sample=sample, horizon=horizon, cpu_share=cpu_share, margin=margin)
    try:
        return await judging.run_judgement(settings, against, b, options)
    except gens.GenerationError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None


@router.post("/{name}/activate", responses={
    404: {"description": "No such generation"},
    409: {"description": "Not caught up, or judged worse than `if_better_than` beyond the margin (the figures)"}})
async def activate(settings: AdminDep, name: str, if_better_than: str | None = None,
                   margin: float = Query(judging.DEFAULT_MARGIN, ge=0), force: bool = False) -> dict:
    """Switch reads to NAME; with `if_better_than=A`, only when NAME's last judgement against A
    is not worse beyond `margin` (409 with the figures otherwise)."""
    def check() -> str | None:
        import psycopg

        with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
            for generation in filter(None, (name, if_better_than)):
                gens.get_generation(conn, settings.kafka.topic_prefix, generation)
        if not if_better_than:
            return None
        found = judging.last_judgement(settings, name, if_better_than)
        if found is None:
            raise PermissionError(f"no judgement of {name!r} against {if_better_than!r} yet: judge it first")
        decision = judging.J.gate(found["overall"], margin)
        if not decision.allowed:
            raise PermissionError(decision.message)
        return decision.message

    try:
        message = await asyncio.to_thread(check)
    except gens.GenerationError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None
    except PermissionError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    progress = await replays.progress(settings, name)
    if not progress.caught_up and not force:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"{name} has processed {progress.processed}/"
                            f"{progress.total} events; wait for it (or force)")

    def switch() -> str | None:
        import psycopg

        with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
            return gens.activate(conn, settings.kafka.topic_prefix, name)

    previous = await asyncio.to_thread(switch)
    return {"active": name, "previous": previous, "gate": message}
