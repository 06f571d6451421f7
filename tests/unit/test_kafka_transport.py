"""The faust app uses the transport whose consumer waits at most `kafka.fetch_max_wait_ms`."""

from pathlib import Path

from memory_agent.settings import KafkaSettings, Settings
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
    assert [runner.stage.name for runner in app.stage_runners] == ["summarize-windows"]


async def test_a_quiet_app_consumer_waits_longer(tmp_path: Path):
    settings = Settings(state_dir=tmp_path, kafka=KafkaSettings(fetch_max_wait_ms=25, idle_fetch_max_wait_ms=400),
                        systems=["window"])
    app = make_app(settings)
    thread = app.consumer._thread
    thread._create_worker_consumer(app.transport)
    assert (thread._pace.busy_ms, thread._pace.idle_ms) == (25, 400)
    assert [runner.idle_fetch_max_wait_ms for runner in app.stage_runners] == [400]
