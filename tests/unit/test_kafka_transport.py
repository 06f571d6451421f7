"""The faust app's transport: the configured fetch wait, and the two takeover holes it closes."""

import contextlib
from pathlib import Path

from aiokafka import TopicPartition

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


async def _deliveries(app, fetches) -> list[int]:
    """faust's own fetch loop (`Consumer._drain_messages`) over `fetches` (lists of offsets of one
    stream partition, one fetch each): the offsets it hands on to the streams, in order."""
    from types import SimpleNamespace

    from faust.types import TP

    consumer, tp, delivered = app.consumer, TP("conversation-events", 1), []
    fetcher = SimpleNamespace(_stopped=SimpleNamespace(is_set=lambda: not fetches))

    async def callback(message):
        delivered.append(message.offset)

    async def getmany(timeout):
        for offset in fetches.pop(0):
            yield tp, SimpleNamespace(offset=offset, topic=tp.topic, key=b"k", value=b"v")

    consumer.callback, consumer.getmany = callback, getmany
    await consumer._drain_messages(fetcher)
    return delivered


async def test_a_record_the_seek_brings_back_is_delivered_again_and_no_jump_is_a_gap(tmp_path: Path):
    """After a rebalance faust resumes the stream partitions before it seeks them to their
    committed offsets: a fetch in between hands @24-26 on, the seek brings @24 back. faust's own
    rule dropped every record below the highest offset handed on (a conversation whose records
    had not all reached the processor then stalled for good: tests/integration/test_upgrade.py
    under load); here every fetched record is delivered, and a jump is no gap to acknowledge."""
    app = make_app(Settings(state_dir=tmp_path, systems=["window"]))
    assert isinstance(app.consumer._read_offset, kafka_transport.StreamReadOffsets)
    assert await _deliveries(app, [[24, 25, 26], [24, 25, 26, 27], [40]]) == [24, 25, 26, 24, 25, 26, 27, 40]
    assert not app.consumer._gap  # faust counted 28-39 as a gap, acknowledged at the next commit


def test_changelog_partitions_keep_faust_s_read_offsets():
    from faust.types import TP

    offsets = kafka_transport.StreamReadOffsets(lambda: {"app-conversation-state-changelog"})
    changelog, stream = TP("app-conversation-state-changelog", 0), TP("conversation-events", 0)
    offsets[changelog], offsets[stream] = 41, 41
    assert (offsets[changelog], offsets[stream]) == (41, None)
    assert offsets[TP("app-conversation-state-changelog", 3)] is None  # never read: faust's default
