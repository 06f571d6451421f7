"""The faust app's transport: the configured fetch wait, and the two takeover holes it closes."""

import contextlib
from pathlib import Path

from aiokafka import TopicPartition
from faust.types import TP

from core.settings import KafkaSettings, Settings
from streams import kafka_transport
from streams.app import make_app


async def test_the_app_fetches_with_the_configured_wait(tmp_path: Path):
    settings = Settings(state_dir=tmp_path, kafka=KafkaSettings(fetch_max_wait_ms=25), systems=["window"])
    app = make_app(settings)
    assert app.conf.broker[0].scheme == kafka_transport.SCHEME
    assert isinstance(app.transport, kafka_transport.Transport)
    thread = app.consumer._thread
    consumer = thread._create_worker_consumer(app.transport)
    assert consumer._fetch_max_wait_ms == 25  # faust's own choice would be 1500
    assert [[stage.name for stage in runner.stages] for runner in app.stage_runners] == [["summarize-windows"]]


async def test_a_quiet_app_consumer_waits_longer(tmp_path: Path):
    settings = Settings(state_dir=tmp_path, kafka=KafkaSettings(fetch_max_wait_ms=25, idle_fetch_max_wait_ms=400),
                        systems=["window"])
    app = make_app(settings)
    thread = app.consumer._thread
    thread._create_worker_consumer(app.transport)
    assert (thread._pace.busy_ms, thread._pace.idle_ms) == (25, 400)
    assert [runner.idle_fetch_max_wait_ms for runner in app.stage_runners] == [400]


class FakeConsumer:
    def __init__(self, committed):
        self.committed, self.sought_to_beginning = committed, []

    async def seek_to_committed(self):
        return dict(self.committed)

    async def seek_to_beginning(self, *partitions):
        self.sought_to_beginning += partitions


async def test_a_partition_never_committed_is_read_from_its_beginning_after_a_rebalance():
    """aiokafka seeks only committed offsets > 0; records fetched during the rebalance of a
    partition without one were skipped (a takeover lost a summary result)."""
    stream, fresh, committed_zero = TopicPartition("memory", 0), TopicPartition("memory", 1), TopicPartition("memory", 2)
    changelog = TopicPartition("app-window-state-changelog", 1)
    consumer = FakeConsumer({stream: 17, fresh: None, committed_zero: 0, changelog: None})
    result = await kafka_transport.seek_to_committed_or_beginning(consumer, {"app-window-state-changelog"})
    assert sorted(consumer.sought_to_beginning) == [fresh, committed_zero]  # not the changelog: recovery's
    assert result == consumer.committed


class FakeBuffer:
    """Like faust's ProducerBuffer on a busy loop: one flush sends a record or two, then gives up."""

    def __init__(self, size):
        self.size, self.flushes = size, 0

    async def flush(self):
        self.flushes += 1
        self.size = max(0, self.size - 2)


async def test_the_producer_flush_empties_the_buffer_before_offsets_are_committed(tmp_path: Path):
    buffer = FakeBuffer(7)
    await kafka_transport.drain(buffer)
    assert buffer.size == 0 and buffer.flushes == 4
    app = make_app(Settings(state_dir=tmp_path, systems=["window"]))
    assert isinstance(app.producer, kafka_transport._Producer)


class Record:
    def __init__(self, offset):
        self.offset = offset


class FetchingConsumer:
    """An aiokafka consumer as faust's fetch sees it; `during_fetch` runs while the fetch waits
    (a rebalance stopping the flow), and `seek` records where a partition is moved."""

    def __init__(self, records, during_fetch=lambda: None):
        self._closed, self.sought = False, {}

        class Subscriptions:
            @contextlib.contextmanager
            def fetch_context(self):
                yield

        class Fetcher:
            _closed, _subscriptions = False, Subscriptions()

            async def fetched_records(self, partitions, timeout=0, max_records=None):
                during_fetch()
                return records

        self._fetcher = Fetcher()

    def seek(self, tp, offset):
        self.sought[tp] = offset


async def test_records_fetched_while_a_rebalance_stopped_the_flow_are_put_back(tmp_path: Path):
    """The recovery stall (docs/backbone.md): a fetch still waiting when a short rebalance stopped
    the flow took a changelog partition's records after the recovery sought it to its start;
    faust dropped them (flow stopped) and the restore never reached that partition's end."""
    app = make_app(Settings(state_dir=tmp_path, systems=["window"]))
    thread = app.consumer._thread
    changelog, stream = TopicPartition("app-conversation-state-changelog", 0), TopicPartition("conversations", 2)
    records = {changelog: [Record(0), Record(1), Record(2)], stream: [Record(7)]}

    app.consumer.resume_flow()
    consumer = FetchingConsumer(records, during_fetch=app.consumer.stop_flow)
    assert await thread._fetch_records(consumer, {changelog, stream}, timeout=1.0) == {}
    assert consumer.sought == {changelog: 0, stream: 7}  # fetched again once the flow resumes

    app.consumer.resume_flow()
    consumer = FetchingConsumer(records)
    assert await thread._fetch_records(consumer, {changelog, stream}, timeout=1.0) == records
    assert consumer.sought == {}


async def test_records_of_a_partition_paused_during_the_fetch_are_put_back(tmp_path: Path):
    """aiokafka reads an empty partition set as every partition: a fetch whose set a recovery
    emptied meanwhile returned the standby partitions' records, and faust dropped them."""
    app = make_app(Settings(state_dir=tmp_path, systems=["window"]))
    thread = app.consumer._thread
    active, standby = TopicPartition("app-conversation-state-changelog", 0), TopicPartition("app-conversation-state-changelog", 1)
    kept = [Record(3)]
    records = {active: kept, standby: [Record(5), Record(6)]}
    app.consumer.resume_flow()
    consumer = FetchingConsumer(records)
    assert await thread._fetch_records(consumer, {active}, timeout=1.0) == {active: kept}
    assert consumer.sought == {standby: 5}


class StreamPartition:
    """A stream partition as aiokafka and faust's fetch loop (`Consumer._drain_messages`) see it:
    aiokafka's position, moved past every record it hands out, and faust's rule for a record it
    got: delivered into the stream's queue unless its offset lies below the partition's read
    offset (then dropped as read already)."""

    def __init__(self, consumer, tp, *, position, read_offset=None):
        self.consumer, self.tp, self.position = consumer, tp, position
        consumer._read_offset[tp] = read_offset

    def fetch(self, queue) -> None:
        """One pass of the fetch loop: the record at the position, if the partition is fetched now."""
        if self.tp not in self.consumer._get_active_partitions() or not self.consumer.flow_active:
            return
        offset, self.position = self.position, self.position + 1
        read = self.consumer._read_offset[self.tp]
        if read is None or offset >= read:
            queue.put_nowait((self.tp.partition, offset))
            self.consumer._read_offset[self.tp] = offset


async def test_the_end_of_a_rebalance_delivers_every_record_from_the_committed_offsets(tmp_path: Path):
    """The takeover hole (issue 22, docs/backbone.md): faust's recovery ends by resuming the stream
    partitions, seeking them to their committed offsets, resuming the flow control (which clears
    the streams' queues) and the flow, and its fetch loop ran all along (the flow active since
    the changelog phase). A held partition's batch cut off at @55 (delivered up to @65, committed
    55): @55, fetched from the sought position before the seek reset the read offset, was dropped
    as read, and the fold went on at @56. A newly assigned partition never committed: what the
    fetch loop delivered during the seek was cleared from the queue, and the fold went on after
    it (a run placed 477 of 480 messages). Here faust's own `Recovery.on_recovery_completed` runs,
    with aiokafka and the fetch loop modelled (`StreamPartition`): the fetch loop runs before and
    after the seek, while the seek waits for the broker."""
    app = make_app(Settings(state_dir=tmp_path, systems=["window"]))
    consumer, recovery = app.consumer, app.tables.recovery
    changelog = TP(next(iter(app.tables.changelog_topics)), 0)
    held_tp, new_tp = TP("conversations", 1), TP("conversations", 0)
    assignment = {changelog, held_tp, new_tp}
    held = StreamPartition(consumer, held_tp, position=66, read_offset=65)
    new = StreamPartition(consumer, new_tp, position=0)  # aiokafka's reset to the beginning
    queue = app.FlowControlQueue(maxsize=1000, clear_on_resume=True)  # a stream's queue, as faust makes it

    async def seek_to_committed():  # the consumer thread's seek, while faust's fetch loop runs on
        for partition in (held, new):
            partition.fetch(queue)
        held.position, new.position = 55, 0
        for partition in (held, new):
            partition.fetch(queue)
        return {held_tp: 55, new_tp: None, changelog: None}

    async def no_fetcher():
        return None

    consumer.assignment = lambda: set(assignment)
    consumer._thread.seek_to_committed = seek_to_committed
    app._fetcher.maybe_start = no_fetcher
    # The rebalance so far: every partition paused at the assignment, the changelog phase's flow.
    consumer._set_active_tps(assignment)
    consumer.pause_partitions(assignment)
    consumer.resume_partitions({changelog})
    app.flow_control.resume()
    consumer.resume_flow()

    await recovery.on_recovery_completed(app.consumer_generation_id)
    for _ in range(2):
        for partition in (held, new):
            partition.fetch(queue)

    delivered = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [offset for partition, offset in delivered if partition == held_tp.partition] == [55, 56]
    assert [offset for partition, offset in delivered if partition == new_tp.partition] == [0, 1]
    assert {held_tp, new_tp} <= consumer._get_active_partitions() and consumer.flow_active


def test_an_assignment_makes_no_stream_partition_active_before_the_rebalance_s_end(tmp_path: Path):
    """faust marks every assigned partition active and pauses them a few awaits later; at a worker's
    first assignment the flow is active (nothing was revoked), so a fetch in between could take
    stream records before the table is restored. Only the rebalance's end makes them active."""
    app = make_app(Settings(state_dir=tmp_path, systems=["window"]))
    consumer = app.consumer
    changelog, stream = TP(next(iter(app.tables.changelog_topics)), 0), TP("conversations", 0)
    consumer._set_active_tps({changelog, stream})
    assert consumer._get_active_partitions() == {changelog} and consumer.flow_active
    consumer.pause_partitions({changelog, stream})
    consumer.resume_partitions({stream})  # the rebalance's end: held back until the flow resumes
    assert stream not in consumer._get_active_partitions()
    consumer.resume_flow()
    assert consumer._get_active_partitions() == {stream}
