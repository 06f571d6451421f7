"""Records each served turn-start context as a context.served event (docs/lineage.md), off the
request's critical path: the event is built from the response, then a background task queues
it on a producer of its own and waits for the ack there. A failure is logged and counted,
never raised to the request. If the process dies, events still queued (not yet acknowledged)
are lost: that turn has no record, and its reconstruction says so."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from prometheus_client import Counter

from api.schemas import ContextOut
from retrieval.request import ContextRequest
from domain.lineage import served_topic, version_of
from core.settings import Settings
from schemas.codec import encode_checked, new_event
from schemas.lineage_events import CONTEXT_SERVED, ContextServed, ServedClock, ServedItem, ServedSummary, ServedTopic

log = logging.getLogger(__name__)
RECORDED = Counter("memory_context_served_records_total", "context.served events by outcome", ["outcome"])
MAX_PENDING = 1000  # past this many unacknowledged records, new ones are dropped (and counted)


def served_payload(request: ContextRequest, out: ContextOut, clock: tuple[str, int | None] | None = None
                   ) -> ContextServed:
    """What was included, with ids, versions and scores (pure: from the response), and the
    projection clock (generation, position) read when the read began."""
    turn = request.before_seq if request.before_seq is not None else out.watermark.last_seq + 1
    summary = None if out.summary is None else ServedSummary(
        memory_id=out.summary.memory_id, start_seq=out.summary.start_seq, end_seq=out.summary.end_seq,
        prompt_version=out.summary.prompt_version, model=out.summary.model)
    retrieved, error = _retrieved(out.retrieved)
    topic = out.active_topic
    active = None
    if topic is not None and getattr(topic, "topic_id", None) is not None:
        active = ServedTopic(topic_id=topic.topic_id, summary_upto_seq=topic.summary_upto_seq,
                             message_seqs=[m.seq for m in topic.messages], restored=topic.restored)
    return ContextServed(
        turn_seq=max(turn, 0), before_seq=request.before_seq, query=request.query, budget_tokens=request.budget_tokens,
        mode=out.mode, summary=summary, gap_seqs=[m.seq for m in out.messages], retrieved=retrieved,
        retrieval_error=error, active_topic=active, watermark=out.watermark.model_dump(mode="json"),
        served_at=request.now,
        clock=None if clock is None or clock[1] is None else ServedClock(generation=clock[0], position=clock[1]))


def _retrieved(section: Any) -> tuple[list[ServedItem] | None, str | None]:
    if section is None:
        return None, None
    items = [ServedItem(kind=i.kind, id=i.id, version=version_of(i.content), score=i.score.final, tokens=i.tokens)
             for i in section.items]
    return items, section.error


class ServedRecorder:
    """A lazily started producer of context.served events; `record` never raises or waits."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._starting: asyncio.Lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def record(self, request: ContextRequest, out: ContextOut, clock: tuple[str, int | None] | None = None) -> None:
        try:
            payload = served_payload(request, out, clock)
            envelope = new_event(
                CONTEXT_SERVED, payload, tenant_id=request.tenant_id,
                conversation_id=request.conversation.conversation_id, user_id=request.user_id,
                subject_id=request.subject_id, occurred_at=request.now)
            value = encode_checked(envelope, payload=payload)  # the walk only if the bytes can need it
        except Exception:  # noqa: BLE001 - a record that cannot be built never fails the request
            log.exception("context.served not recorded: could not build the event")
            RECORDED.labels(outcome="invalid").inc()
            return
        if len(self._tasks) >= MAX_PENDING:
            RECORDED.labels(outcome="dropped").inc()
            return
        task = asyncio.get_running_loop().create_task(self._send(value, envelope.key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, value: bytes, key: bytes) -> None:
        try:
            producer = await self._start()
            await (await producer.send(served_topic(self.settings), value=value, key=key))
            RECORDED.labels(outcome="sent").inc()
        except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 - Kafka down: the turn has no record
            log.warning("context.served not recorded: %s: %s", type(error).__name__, error)
            RECORDED.labels(outcome="failed").inc()

    async def _start(self) -> AIOKafkaProducer:
        async with self._starting:
            if self._producer is None:
                producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka.bootstrap_servers,
                                            enable_idempotence=True, acks="all", linger_ms=20)
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()  # the next record tries again with a new one
                    raise
                self._producer = producer
            return self._producer

    async def close(self, timeout: float = 5.0) -> None:
        """Wait briefly for records in flight (a clean shutdown loses none), then stop."""
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in late:  # Kafka unreachable: these records are lost (counted as failed)
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()


def recorder_for(app_state: Any) -> ServedRecorder:
    """The app's recorder (made by the app's lifespan, api/app.py)."""
    return app_state.served_recorder
