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
