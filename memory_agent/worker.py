"""The worker process: the conversation processor, its stages and the projectors, until stopped."""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import signal
from typing import TYPE_CHECKING

from core import privacy, telemetry
from core.settings import Settings
from memory_agent.worker_metrics import report_lag, serve_metrics
from projections.catalog import NO_LINGER, consumer_groups, group_name, projectors  # noqa: F401 - tests import them here
from projections.runner import ProjectorGroup
from projections.scrub import run_scrubs
from runtime.embedding_graph import settings_following_stored
from runtime.kafka_topics import changelog_specs, ensure_topics, topic_specs
from runtime.llm_factory import preload_llm_client

if TYPE_CHECKING:
    import faust

log = logging.getLogger(__name__)


async def run_projectors(settings: Settings, stop: asyncio.Event | None = None, *, lag: bool = False) -> None:
    """Run every projector until `stop` is set, a signal arrives, or the task is cancelled;
    `lag`: also refresh the consumer-lag gauge (the worker process, which serves /metrics)."""
    await ensure_topics(settings)
    privacy.install(settings)  # sealed messages open in every decode (docs/lineage.md)
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    runners = [ProjectorGroup(settings, group, fetch_min_bytes=1 if any(p.name in NO_LINGER for p in group)
                              else settings.kafka.projector_fetch_min_bytes,
                              time_ordered=any(p.name == "erasure" for p in group),  # on a consumer of its own
                              group_name=group_name(group))
               for group in consumer_groups(settings, projectors(settings))]
    tasks = [asyncio.create_task(r.run(), name=f"projectors-{r.name}") for r in runners]
    tasks.append(asyncio.create_task(run_scrubs(settings), name="erasure-scrub"))  # erasure on disk
    if lag and settings.worker.metrics_port:  # the gauge /metrics shows (memory_agent/worker_metrics.py)
        tasks.append(asyncio.create_task(report_lag(settings), name="consumer-lag"))
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception():
                raise task.exception()
    finally:
        for task in (*tasks, stopper):
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)


def _log_cpu_split() -> None:
    from core.metrics import cpu_split

    log.warning("worker cpu split at exit: %s", json.dumps(cpu_split()))  # read by bench/system_bench.py


ROLES = ("all", "agents", "stages", "projectors")


def stream_ports():
    """The read model behind the stages' ports (streams/ holds no SQL and no database client)."""
    from projections.chunk_reads import PostgresChunkReads
    from projections.erasure_reads import PostgresErasureReads, PostgresRederiveReads
    from projections.topic_reads import PostgresBacklogReads, PostgresTopicReads
    from projections.window_reads import PostgresWindowReads
    from runtime.db import open_pool
    from streams.context import StreamPorts

    return StreamPorts(open_pool=open_pool, window_reads=PostgresWindowReads, topic_reads=PostgresTopicReads,
                       backlog_reads=PostgresBacklogReads, chunk_reads=PostgresChunkReads,
                       rederive_reads=PostgresRederiveReads, erasure_reads=PostgresErasureReads)


async def run_stages_only(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """The concurrent stages of the enabled systems (summaries, chunk extraction, topic
    embedding, backlog recall, compaction) without faust's agents: their consumer group is the
    one every worker's stages share, so `--role stages` processes take stage partitions over
    from the others or run them alone (docs/scaling.md, "Roles")."""
    from streams.app import make_app
    from streams.stages import run_stages

    await ensure_topics(settings)
    privacy.install(settings)
    app = make_app(settings, stages=False, ports=stream_ports())  # the systems; only their stage runners run
    if not app.stage_runners:
        raise SystemExit(f"memory-agent worker --role stages: the systems {list(settings.systems)} have no stage")
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(run_stages(app.stage_runners), name="stages")
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([runner, stopper], return_when=asyncio.FIRST_COMPLETED)
        if runner in done:
            runner.result()
    finally:
        for task in (runner, stopper):
            task.cancel()
        await asyncio.gather(runner, stopper, return_exceptions=True)


async def wait_for_batch_hand_over(settings: Settings, poll_s: float = 2.0) -> None:
    """Until the batch replay of this generation has handed every partition over (at once
    when the generation is not rebuilt in batch). The batch runs in the `all` or `agents`
    process; a `stages` or `projectors` process started beside it would otherwise consume
    what the batch is writing (and a member of the stages' group would make the batch's
    commit of that group fail)."""
    if settings.replay_mode != "batch" or settings.replay_until is None:
        return
    from memory_agent.batch_replay import _handed_over, _partitions_of_the_log

    partitions = await _partitions_of_the_log(settings)
    announced = False
    while not await _handed_over(settings, partitions):
        if not announced:
            log.info("waiting for the batch replay of %s to hand over (it runs in the agents' process)",
                     settings.generation)
            announced = True
        await asyncio.sleep(poll_s)


def faust_worker(app: faust.App, log_level: str) -> faust.Worker:
    """faust's worker for `app`, without its terminal spinner (a worker's output is a log): at
    WARNING and above the spinner set the root logger to DEBUG, so every debug call of the process
    (faust's line per record sent, httpcore, openai) built a record its handler then dropped
    (~3 % of a stub worker's CPU, docs/scaling.md)."""
    import faust  # noqa: PLC0415 - as run_worker: the CLI's other commands do not load it

    worker = faust.Worker(app, loglevel=log_level.lower(), quiet=True)
    worker.spinner = None
    return worker


def run_worker(settings: Settings, *, role: str = "all") -> None:
    """Entry point of `memory-agent worker`: `role` "all" runs the ordered processor (faust agent),
    the stages and the projectors in one process; "agents", "stages" and "projectors" run one
    part each, so each part can have its own number of processes (docs/scaling.md, "Roles")."""
    if role not in ROLES:
        raise ValueError(f"unknown worker role {role!r}; one of {', '.join(ROLES)}")
    serve_metrics(settings)  # a taken port (a replay worker beside the live one): a free one, logged
    privacy.install(settings)
    atexit.register(_log_cpu_split)
    stop_tracing = telemetry.configure(settings, "worker")  # None: off (docs/observability.md)
    if stop_tracing is not None:
        atexit.register(stop_tracing)  # the spans still queued go out as the process ends
    # Documents keep the graph the generation's stored vectors have (a changed
    # embedding.integer_matmul does not mix graphs in a live generation; docs/llm-and-embeddings.md).
    settings = asyncio.run(settings_following_stored(settings))
    if role in ("projectors", "stages"):
        # A generation rebuilt in batch (memory_agent/batch_replay) writes the projections and
        # commits the stages' group itself, from the agents' process: wait for its hand-over.
        asyncio.run(wait_for_batch_hand_over(settings))
    if role == "projectors":
        asyncio.run(run_projectors(settings, lag=True))
        return
    if role in ("all", "stages"):
        preload_llm_client(settings)  # the stages' LLM client before the first record, not mid-stream
    if role == "stages":
        asyncio.run(run_stages_only(settings))
        return
    from streams.app import make_app

    if settings.replay_mode == "batch" and settings.replay_until is not None:
        from memory_agent.batch_replay import run_batch

        run_batch(settings)  # the history in bulk first; the agents below take over where it stopped

    # faust runs on the thread's current loop; create the topics on that same loop first.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from memory_agent.upgrade import carry_over

    loop.run_until_complete(carry_over(settings))  # from the per-system agents' tables, once (upgrade.py)
    app = make_app(settings, stages=role == "all", ports=stream_ports())
    loop.run_until_complete(ensure_topics(settings, topic_specs(settings) + changelog_specs(app)))

    if role == "all":
        @app.task
        async def project() -> None:
            await run_projectors(settings, stop=asyncio.Event(), lag=True)

    worker = faust_worker(app, settings.log_level)
    # aiokafka builds a debug record per request when its logger inherits DEBUG.
    logging.getLogger("aiokafka").setLevel(max(logging.INFO, logging.getLogger().level))
    worker.execute_from_commandline()
