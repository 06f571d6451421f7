"""`memory-agent replay ...` and `memory-agent generations ...`: rebuild, compare, switch, drop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from datetime import timezone
from pathlib import Path

import click
import psycopg
from tqdm import tqdm

from memory_agent import judge_report
from api import judging
from memory_agent import replay as replays
from core.settings import get_settings
from projections import generations as gens
from projections.diff import diff_generations, render_text
from psycopg import sql
from runtime import judge as R


@contextlib.contextmanager
def _conn() -> Iterator[psycopg.Connection]:
    """A connection to the read model; unreachable or not migrated: a clear error, no traceback."""
    dsn = get_settings().postgres.dsn
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            yield conn
    except psycopg.errors.UndefinedTable as exc:
        raise click.ClickException(f"{str(exc).splitlines()[0]}: run `memory-agent migrate` first") from None
    except psycopg.OperationalError as exc:
        raise click.ClickException(f"cannot reach PostgreSQL ({str(exc).strip().splitlines()[0]});"
                                   " is it running? (`memory-agent infra status`)") from None


@click.group()
def replay() -> None:
    """Rebuild all memory from the start of the log into a new generation."""


@replay.command("start")
@click.option("--generation", "name", required=True, metavar="NAME", help="Name of the new generation ([a-z0-9_]).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Setting for the new generation, e.g. llm.summary_prompt_version=summary-v2 (repeatable).")
@click.option("--detach", is_flag=True, help="Start it and return; watch with `replay status`.")
@click.option("--mode", type=click.Choice(replays.MODES), default="auto", show_default=True,
              help="batch: rebuild the history in bulk, then hand over to the stream agents (window and"
                   " facts systems); stream: the stream agents from the start of the log; auto: batch when"
                   " every system of the generation has it.")
def start(name: str, sets: tuple[str, ...], detach: bool, mode: str) -> None:
    """Start a replay worker that rebuilds memory into generation --generation NAME; show its
    progress until it has caught up with the log."""
    settings = get_settings()
    try:
        log, mode = asyncio.run(replays.start_replay(settings, name, replays.parse_overrides(sets), mode))
    except (ValueError, gens.GenerationError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"replay worker for generation {name!r} started ({mode} replay; log: {log});"
               " the live generation keeps serving")
    if not detach:
        try:
            _watch(settings, name)
        except KeyboardInterrupt:
            click.echo(f"\nstill running in the background: `memory-agent replay status {name}`")


def _watch(settings, name: str) -> None:
    bar = tqdm(total=1, unit="ev", desc=f"replay {name}", dynamic_ncols=True)
    while True:
        p = asyncio.run(replays.progress(settings, name))
        bar.total = max(p.total, 1)
        bar.n = p.processed
        bar.set_postfix(derived=f"{p.derived_projected}/{p.derived_total}", waiting_for=_behind(p.behind))
        bar.refresh()
        if p.caught_up and p.total > 0:
            bar.close()
            click.echo(f"generation {name!r} has caught up with the log: `memory-agent generations activate {name}`")
            return
        time.sleep(1.0)


@replay.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(name: str | None, as_json: bool) -> None:
    """Progress of one generation (or all): events processed / total, derived events, caught up?"""
    settings = get_settings()
    with _conn() as conn:
        names = [name] if name else [g.name for g in gens.list_generations(conn, settings.kafka.topic_prefix)]
        usage = {n: gens.cache_usage(conn, settings.kafka.topic_prefix, n) for n in names}
    report = {n: {**asyncio.run(replays.progress(settings, n)).as_dict(), "llm_cache": usage[n]} for n in names}
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for n, p in report.items():
        click.echo(
            f"{n}: {p['processed']}/{p['total']} events, derived {p['derived_projected']}/{p['derived_total']},"
            f" caught up: {p['caught_up']}, llm cache: {p['llm_cache'] or 'unused'}"
            + (f", waiting for: {_behind(p['behind'])}" if p["behind"] else "")
        )


def _behind(behind: dict[str, int]) -> str:
    """'message_index 1,234, facts 56': the parts not caught up, furthest behind first."""
    return ", ".join(f"{name} {left:,}" for name, left in sorted(behind.items(), key=lambda kv: -kv[1])) or "-"


@replay.command("resume")
@click.argument("name")
def resume(name: str) -> None:
    """Start NAME's replay worker again (it died, or the machine restarted), with its settings."""
    settings = get_settings()
    try:
        log, mode = replays.resume_replay(settings, name)
    except gens.GenerationError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"replay worker for generation {name!r} started again ({mode} replay; log: {log})")


@replay.command("cancel")
@click.argument("name")
def cancel(name: str) -> None:
    """Stop NAME's replay worker and mark it cancelled (`generations drop` removes it)."""
    settings = get_settings()
    stopped = replays.stop_worker(settings, name)
    with _conn() as conn:
        gens.set_status(conn, settings.kafka.topic_prefix, name, "cancelled")
    click.echo(f"{name}: {'worker stopped, ' if stopped else ''}cancelled")


@click.group()
def generations() -> None:
    """Inspect, compare, switch and drop generations of the read model."""


@generations.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per generation, in a list.")
def list_cmd(as_json: bool) -> None:
    """Every generation of this deployment: * marks the one serving reads; then its status,
    creation time and the settings it was built with (replay --set overrides)."""
    settings = get_settings()
    with _conn() as conn:
        rows = gens.list_generations(conn, settings.kafka.topic_prefix)
    if as_json:
        click.echo(json.dumps([{
            "name": g.name, "active": g.is_active, "status": g.status, "settings": g.config,
            "created_at": g.created_at.isoformat(),
            "activated_at": g.activated_at.isoformat() if g.activated_at else None,
        } for g in rows], indent=2))
        return
    if not rows:
        click.echo(f"no generations for topic prefix {settings.kafka.topic_prefix!r} (run `memory-agent migrate`)")
    for g in rows:
        mark = "*" if g.is_active else " "
        overrides = ", ".join(f"{k}={v}" for k, v in sorted(g.config.items())) or "defaults"
        click.echo(f"{mark} {g.name:20} {g.status:10} created {g.created_at:%Y-%m-%d %H:%M}  settings: {overrides}")


@generations.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def diff(a: str, b: str, as_json: bool) -> None:
    """Per conversation, what differs between generations A and B."""
    with _conn() as conn:
        result = diff_generations(conn, a, b)
    click.echo(json.dumps(result, indent=2, default=str) if as_json else render_text(result))


@generations.command("judge")
@click.argument("a")
@click.argument("b")
@click.option("--sample", type=click.IntRange(min=1), metavar="N", help="Judge N of A's recorded turns (a stable sample).")
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]),
              help="Only turns served at or after this time (UTC).")
@click.option("--questions", "questions_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSONL of conversation, question, answer (optional before_seq): answer words and hits per kind.")
@click.option("--tenant", help="The tenant of the --questions conversations (default: the only one of A's turns).")
@click.option("--horizon", type=click.IntRange(min=1), default=20, show_default=True,
              help="Messages after the turn that count as what came next.")
@click.option("--margin", type=click.FloatRange(min=0), default=judging.DEFAULT_MARGIN, show_default=True,
              help="A difference in foresight within this is 'same'.")
@click.option("--cpu-share", type=click.FloatRange(min=0.05, max=1.0), default=0.5, show_default=True,
              help="At most this share of one core for the judge (paced between turns).")
@click.option("--json", "as_json", is_flag=True, help="The whole report, per turn, as JSON.")
def judge_cmd(a: str, b: str, sample: int | None, since, questions_file: Path | None, tenant: str | None,
              horizon: int, margin: float, cpu_share: float, as_json: bool) -> None:
    """Judge generation B on the turns generation A served: A's recorded contexts against B asked
    the same requests as of the same turns (B writes nothing), scored by how much of what came
    next in the log each context held. Stored as the last judgement (the gate, the dashboard)."""
    settings = get_settings()
    options = R.Options(sample=sample, since=since.replace(tzinfo=timezone.utc) if since else None,
                        horizon=horizon, cpu_share=cpu_share, margin=margin)
    try:
        bar = None if as_json else tqdm(total=0, unit="turn", desc=f"judge {b}", dynamic_ncols=True, leave=False)

        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar.total, bar.n = total, done
                bar.refresh()

        report = asyncio.run(judging.run_judgement(settings, a, b, options, progress))
        if bar is not None:
            bar.close()
        if questions_file is not None:
            questions = judging.read_questions(questions_file)
            report["labelled"] = asyncio.run(judging.run_questions(
                settings, a, b, questions, tenant or _one_tenant(settings, a), cpu_share))
    except (gens.GenerationError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    click.echo(judge_report.render_text(report))
    if "labelled" in report:
        click.echo(judge_report.render_questions(report["labelled"]))


def _one_tenant(settings, generation: str) -> str:
    with _conn() as conn:
        rows = conn.execute(sql.SQL("SELECT DISTINCT tenant_id FROM {}.conversations LIMIT 2").format(
            sql.Identifier(f"gen_{generation}"))).fetchall()
    if len(rows) != 1:
        raise click.ClickException("--questions needs --tenant: the generation holds"
                                   f" {'no' if not rows else 'several'} tenants")
    return rows[0][0]


@generations.command("activate")
@click.argument("name")
@click.option("--force", is_flag=True, help="Switch even if NAME has not caught up with the log.")
@click.option("--if-better-than", "baseline", metavar="A",
              help="Refuse unless NAME's last judgement against A (or a new one) is not worse beyond --margin.")
@click.option("--margin", type=click.FloatRange(min=0), default=judging.DEFAULT_MARGIN, show_default=True,
              help="With --if-better-than: how much worse in foresight is still accepted.")
@click.option("--judge-now", is_flag=True, help="With --if-better-than: judge again instead of the last judgement.")
def activate(name: str, force: bool, baseline: str | None, margin: float, judge_now: bool) -> None:
    """Switch reads to NAME atomically (activating the previous one again is the rollback)."""
    settings = get_settings()
    with _conn() as conn:
        try:  # issue 27: an unknown name says so, not "processed 0/54 events"
            gens.get_generation(conn, settings.kafka.topic_prefix, name)
            if baseline:
                gens.get_generation(conn, settings.kafka.topic_prefix, baseline)
        except gens.GenerationError as exc:
            raise click.ClickException(str(exc)) from None
    if baseline:
        decision = judging.gate(settings, baseline, name, margin, judge_now, R.Options(margin=margin))
        if not decision.allowed:
            raise click.ClickException(decision.message)
        click.echo(decision.message)
    p = asyncio.run(replays.progress(settings, name))
    if not p.caught_up and not force:
        raise click.ClickException(
            f"{name} has processed {p.processed}/{p.total} events and {p.derived_projected}/{p.derived_total} "
            "derived events; wait for it (or --force)"
        )
    with _conn() as conn:
        try:
            previous = gens.activate(conn, settings.kafka.topic_prefix, name)
        except gens.GenerationError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"reads now come from {name}" + (f" (rollback: `memory-agent generations activate {previous}`)"
                                                   if previous and previous != name else ""))


@generations.command("drop")
@click.argument("name")
def drop(name: str) -> None:
    """Stop NAME's worker, delete its topics and its schema. Refuses the active generation."""
    settings = get_settings()
    with _conn() as conn:
        try:
            if gens.get_generation(conn, settings.kafka.topic_prefix, name).is_active:
                raise gens.GenerationError(f"{name!r} serves reads; activate another generation first")
        except gens.GenerationError as exc:
            raise click.ClickException(str(exc)) from None
    replays.stop_worker(settings, name)
    topics = asyncio.run(replays.drop_generation_topics(settings, name))
    with _conn() as conn:
        gens.drop(conn, settings.kafka.topic_prefix, name)
    click.echo(f"dropped {name}: schema gen_{name}, {len(topics)} topic(s)")
