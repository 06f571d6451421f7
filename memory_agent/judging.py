"""Runs a judgement of one generation against another for the CLI and the admin API (issue 26):
each generation read with the settings it was built with, the result stored for the gate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Callable

import psycopg

from domain import judge as J
from memory_agent.embeddings import make_embedder
from memory_agent.settings import Settings
from projections import generations as gens
from projections import judgements
from retrieval.query_cache import CachedQueryEmbedder
from runtime import judge as R

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
    built = R.settings_with(settings, overrides).model_copy(update={"generation": name})
    return built.model_copy(update={"embedding": built.embedding.model_copy(update={"intra_op_threads": 1})})


def embedder_of(settings: Settings):
    return CachedQueryEmbedder(make_embedder(settings))


async def run_judgement(settings: Settings, a: str, b: str, options: R.Options,
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


def gate(settings: Settings, a: str, b: str, margin: float, judge_now: bool, options: R.Options) -> J.Gate:
    """`activate B --if-better-than A`: the last judgement of B against A (or a new one)."""
    found = None if judge_now else last_judgement(settings, b, a)
    overall = found["overall"] if found else asyncio.run(run_judgement(settings, a, b, options))["overall"]
    return J.gate(overall, margin)


def render_text(report: dict, per_turn: int = 10) -> str:
    o = report["overall"]
    lines = [f"judgement of {report['b']} against {report['a']} on {o['turns']} recorded turns"
             f" ({o['scored_turns']} with a continuation, {o['errors']} errors):",
             f"  items: kept {o['items_kept']}, lost {o['items_lost']}, gained {o['items_gained']};"
             f" tokens {o['tokens_a']} -> {o['tokens_b']}; summary differs on {o['summary_changed']} turns",
             f"  foresight (share of what came next the context held): {report['a']} {_f(o['foresight_a'])},"
             f" {report['b']} {_f(o['foresight_b'])}, delta {_f(o['delta'], sign=True)}"
             f" (named things: {_f(o['named_a'])} -> {_f(o['named_b'])})",
             f"  turns better {o['turns_better']}, worse {o['turns_worse']}, same {o['turns_same']}",
             f"  verdict: {report['b']} is {o['verdict'].upper()} than {report['a']} (margin {o['margin']})"
             if o["verdict"] in ("better", "worse") else f"  verdict: {o['verdict']} (margin {o['margin']})",
             f"  took {o['seconds']} s ({o['paced_seconds']} s of it paced to {o['cpu_share']} of a core)"]
    worst = sorted((t for t in report["turns"] if t["foresight_a"] is not None and t["foresight_b"] is not None),
                   key=lambda t: t["foresight_b"] - t["foresight_a"])[:per_turn]
    if worst:
        lines.append("  turns that lost most:")
        for t in worst:
            lines.append(f"    {t['conversation']} @{t['turn_seq']}: {_f(t['foresight_a'])} -> {_f(t['foresight_b'])},"
                         f" lost {len(t['lost'])}, gained {len(t['gained'])}, tokens {t['tokens_a']} -> {t['tokens_b']}")
    return "\n".join(lines)


def render_questions(result: dict) -> str:
    lines = ["questions (answer words in the context, hits >= 80%):"]
    for name, q in result["questions"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(q["hits_by_kind"].items())) or "-"
        lines.append(f"  {name}: {q['questions']} questions, answer words {_f(q['answer_words'])},"
                     f" hits {q['hits']} (by kind: {kinds})")
    return "\n".join(lines)


def _f(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.3f}" if sign else f"{value:.3f}")
