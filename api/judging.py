"""Runs a judgement of one generation against another for the CLI and the admin API (issue 26):
each generation read with the settings it was built with, the result stored for the gate
(the judging itself: api/judge.py; the text report: memory_agent/judge_report.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Callable

import psycopg

from domain import judge as J
from core.embeddings import make_embedder
from core.settings import Settings
from projections import generations as gens
from projections import judgements
from retrieval.query_cache import CachedQueryEmbedder
from api import judge as R
from runtime.judge import Options, settings_with

DEFAULT_MARGIN = 0.01


def _generation(settings: Settings, name: str) -> gens.Generation:
    with psycopg.connect(settings.postgres.dsn, autocommit=True, connect_timeout=10) as conn:
        return gens.get_generation(conn, settings.kafka.topic_prefix, name)


def settings_of(settings: Settings, name: str) -> Settings:
    """The settings generation `name` reads with: the environment plus its recorded overrides
    (secrets are recorded by name only and come from the environment, as for `replay resume`).
    The judge embeds queries on one ONNX thread (its share of the machine: runtime/judge.Pacer)."""
    generation = _generation(settings, name)
    overrides = {k: str(v) for k, v in (generation.config.get("overrides") or {}).items()}
    built = settings_with(settings, overrides).model_copy(update={"generation": name})
    return built.model_copy(update={"embedding": built.embedding.model_copy(update={"intra_op_threads": 1})})


def embedder_of(settings: Settings):
    return CachedQueryEmbedder(make_embedder(settings))


async def run_judgement(settings: Settings, a: str, b: str, options: Options,
                        progress: Callable[[int, int], None] | None = None, store: bool = True) -> dict:
    settings_b = settings_of(settings, b)
    _generation(settings, a)  # "no generation 'a'" before any work
    report = await R.judge(settings, a, b, settings_b, embedder_of(settings_b), options, progress)
    if store:
        with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
            judgements.store(conn, settings.kafka.topic_prefix, report)
    return report


def read_questions(path: Path) -> list[dict]:
    """JSONL: conversation, question, answer, optional before_seq (and budget_tokens)."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
        missing = [k for k in ("conversation", "question", "answer") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"{path}:{number}: missing or not text: {', '.join(missing)}")
        rows.append(row)
    return rows


async def run_questions(settings: Settings, a: str, b: str, questions: list[dict], tenant: str,
                        cpu_share: float) -> dict:
    by_name = {name: settings_of(settings, name) for name in (a, b)}
    embedders = {name: embedder_of(s) for name, s in by_name.items()}
    return await R.judge_questions(settings, [a, b], by_name, embedders, questions, tenant, cpu_share=cpu_share)


def last_judgement(settings: Settings, b: str | None = None, a: str | None = None) -> dict | None:
    with psycopg.connect(settings.postgres.dsn, autocommit=True) as conn:
        return judgements.last(conn, settings.kafka.topic_prefix, b, a)


def gate(settings: Settings, a: str, b: str, margin: float, judge_now: bool, options: Options) -> J.Gate:
    """`activate B --if-better-than A`: the last judgement of B against A (or a new one)."""
    found = None if judge_now else last_judgement(settings, b, a)
    overall = found["overall"] if found else asyncio.run(run_judgement(settings, a, b, options))["overall"]
    return J.gate(overall, margin)
