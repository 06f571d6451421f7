"""The message race for the topic fold (docs/lineage.md, "Messages reached after the erasure").

The topic fold takes a message's text from the log (titles, the events that place it, its
embedding), not from the messages projection. When an erasure is applied before the fold reaches
a message written before it, that text must not come back: the fold applies the rule the
messages projector and the message index apply (domain/erasure.py, through
projections/erased_messages.py: one piece of code), so such a message never reaches the fold.
Its seq becomes one the fold passed over; the gap read (domain/topics/gaps.py) finds it missing
from the projected log (the messages projector left it out under the same rule) and gives it up.

Cost. `erasures` is insert-only (projections/erasure.py inserts one row per applied erasure,
ON CONFLICT DO NOTHING; nothing updates or deletes a row), so its row count is its version. The
check keeps every applied erasure in memory (`ErasureSnapshot`, indexed by tenant+user and
tenant+conversation) together with the count it was read at, and for each message asks
the read model only the table's row count (the port `domain/erasure_reads.py`; in PostgreSQL
one prepared statement on a connection of its own, autocommit: each probe sees every erasure
committed before it was sent, `projections/erasure_reads.py`). The same count:
the snapshot is current and decides; another count: the rows are read again first. So the
message is still checked against every erasure committed before the fold took it, as with the
query per message this replaces, at about a third of its cost (docs/topics.md, "Erased messages").
A count that went down (a row deleted, which the code never does) also reloads; a delete and an
insert between two probes would go unseen, which is why the table must stay insert-only.

One probe per processor batch. The processor takes its records in batches (streams/take.py) and
the slice probes once a batch, at its first message (`erasure_of(..., probe=False)` for the
others). Every record of the batch was fetched before that probe was sent, so each message is
still checked against every erasure committed before the fold took it (the batch). What a later
message of the batch no longer sees is an erasure committed between the batch's probe and its
own fold (the batch's fold time, milliseconds). That is the case the per-message probe already
had between its probe and the fold's effects reaching the read model (fold, events, topic
projector): the erasure was applied after the message was taken, so it is handled as every
erasure of a message placed before it is: the erasure projector deletes what the fold placed
from the messages it covers, a placement projected after the erasure is dropped on insert
(migration 0046: its seq is recorded as erased), and a mixed conversation's topics are derived
again (`conversation.rederive.requested`). The batch only widens that window by the fold time
of the records ahead in the batch; no new kind of race comes with it.

While PostgreSQL does not answer, the fold waits (and says so): going on without the check could
bring erased words back, and failing would stop the fold.

Stream replays (`replay_mode` "stream", `replay_until` set). The log's history holds erasures
written after the messages they cover, on other partitions: the fold would reach such a message
before the generation's erasure projector reaches the erasure, place it, and the erasure — applied
before that message was projected — would not know the conversation, so the message's words
stayed in its topic rows. So, as the batch replay does, before the check answers for the first
time it waits (`ReplayBarrier`) until the erasure projector has read the conversation log up to
the replay's start on every partition: every erasure of the replayed history is applied, and no
message it covers reaches the fold. Such an erasure's request to derive a mixed conversation's
topics again (`conversation.rederive.requested`) is then moot — the fold had placed nothing
before it was applied, and places nothing it covers afterwards — and is left out
(`moot_rederive`): re-derived, the topics would get new numbers, unlike the batch replay's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from core.settings import Settings
from domain.erasure import AppliedErasure, LogPosition, erased_by
from domain.erasure_reads import ErasureReads, ReadsUnavailable
from schemas.codec import Event

log = logging.getLogger(__name__)


def position(record) -> LogPosition:
    """The log position of a faust message (its timestamp is in seconds) or an aiokafka record (ms)."""
    timestamp = record.timestamp
    ms = int(round(timestamp * 1000)) if isinstance(timestamp, float) else int(timestamp or 0)
    return LogPosition(record.partition, record.offset, ms)


class ErasureSnapshot:
    """Every applied erasure, read at one version (the table's row count); pure."""

    def __init__(self, erasures: Iterable[AppliedErasure] = (), version: int = 0) -> None:
        self.version = version
        self.by_user: dict[tuple[str, str], list[AppliedErasure]] = {}
        self.by_conversation: dict[tuple[str, str], list[AppliedErasure]] = {}
        for erasure in erasures:
            if erasure.user_id is not None:
                self.by_user.setdefault((erasure.tenant_id, erasure.user_id), []).append(erasure)
            for conversation in erasure.conversations:
                self.by_conversation.setdefault((erasure.tenant_id, conversation), []).append(erasure)

    def erasure_of(self, tenant_id: str, conversation_id: str, user_id: str, at: LogPosition) -> str | None:
        """The id of an applied erasure that covers this message (domain/erasure.py's rule), or None."""
        candidates = (*self.by_user.get((tenant_id, user_id), ()),
                      *self.by_conversation.get((tenant_id, conversation_id), ()))
        return erased_by(candidates, tenant_id, conversation_id, user_id, at) if candidates else None


ERASURE_PROJECTOR = "erasure"  # projections/erasure.py's name in projector_offsets


async def log_offsets_at(settings: Settings, when_ms: int) -> dict[int, int]:
    """{partition: offset of the conversation log's first record at or after `when_ms` (the end
    offset when none is)}, by one group-less consumer."""
    topic = settings.kafka.conversation_topic
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                                 or await _partitions(consumer, topic))]
        found = await consumer.offsets_for_times({tp: when_ms for tp in partitions})
        ends = await consumer.end_offsets(partitions)
        return {tp.partition: found[tp].offset if found.get(tp) is not None else ends[tp] for tp in partitions}
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()  # noqa: SLF001 - a group-less consumer knows no topic yet
    return consumer.partitions_for_topic(topic) or set()


class ReplayBarrier:
    """A stream replay's fold waits until its erasure projector has read the log up to the
    replay's start (module docstring)."""

    def __init__(self, settings: Settings, *, poll_s: float = 0.5) -> None:
        self.settings = settings
        self.until_ms = int(settings.replay_until.timestamp() * 1000)
        self.poll_s = poll_s
        self.passed = False

    async def wait(self, reads: ErasureReads) -> None:
        if self.passed:
            return
        while True:
            try:
                targets = await log_offsets_at(self.settings, self.until_ms)
                break
            except KafkaError as exc:
                log.warning("topic fold: cannot read the replayed log's offsets (%s); again in 5s", exc)
                await asyncio.sleep(5)
        topic, said = self.settings.kafka.conversation_topic, 0.0
        loop = asyncio.get_running_loop()
        begin = loop.time()
        while True:
            read = await reads.projector_offsets(ERASURE_PROJECTOR, topic)
            behind = {p: o for p, o in targets.items() if o > 0 and read.get(p, 0) < o}
            if not behind:
                break
            if loop.time() - said > 30:
                said = loop.time()
                log.info("topic fold: waiting for the erasure projector to read the replayed log (partitions %s)"
                         " before placing messages", sorted(behind))
            await asyncio.sleep(self.poll_s)
        self.passed = True
        log.info("topic fold: the replayed log's erasures are applied (%.1fs); placing messages", loop.time() - begin)

    def covers(self, erasure: AppliedErasure) -> bool:
        """Whether the erasure is one of the replayed history's (applied before the fold placed anything)."""
        return erasure.position.timestamp_ms < self.until_ms


class ErasedCheck:
    """Called by the fold only (concurrency 1): one probe at a time."""

    def __init__(self, reads: ErasureReads, *, retry_s: float = 1.0, max_retry_s: float = 10.0,
                 barrier: ReplayBarrier | None = None) -> None:
        self.reads = reads  # the applied erasures (domain/erasure_reads.py; projections/erasure_reads.py)
        self.barrier = barrier
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.snapshot: ErasureSnapshot | None = None
        self.reloads = 0

    async def erasure_of(self, event: Event, record, *, probe: bool = True) -> str | None:
        """The id of the applied erasure that covers this message, or None. `probe=False`: the
        snapshot of this batch's probe decides (one probe per processor batch, "Cost" above)."""
        e = event.envelope
        snapshot = self.snapshot if not probe and self.snapshot is not None else \
            await self._current(e.conversation_id, e.seq)
        return snapshot.erasure_of(e.tenant_id, e.conversation_id, e.user_id, position(record))

    async def moot_rederive(self, erasure_id: str) -> bool:
        """In a stream replay: whether a re-derivation request comes from an erasure of the
        replayed history (applied before the fold placed anything: nothing to derive again)."""
        if self.barrier is None:
            return False
        snapshot = await self._current("", -1)
        return any(e.event_id == erasure_id and self.barrier.covers(e)
                   for found in (*snapshot.by_user.values(), *snapshot.by_conversation.values()) for e in found)

    async def close(self) -> None:
        await self.reads.close()

    async def _current(self, conversation_id: str, seq: int) -> ErasureSnapshot:
        """The snapshot, read again if the table's count moved since: current as of a probe sent now."""
        wait = self.retry_s
        while True:
            try:
                if self.barrier is not None:
                    await self.barrier.wait(self.reads)
                count = await self.reads.count()
                if self.snapshot is None or count != self.snapshot.version:
                    version, erasures = await self.reads.applied()
                    self.snapshot = ErasureSnapshot(erasures, version)
                    self.reloads += 1
                return self.snapshot
            except ReadsUnavailable as exc:  # the port has dropped its connection
                log.warning("topic fold: erasure check of %s seq %s waits for PostgreSQL (%s); again in %.0fs",
                            conversation_id, seq, exc, wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.max_retry_s)
