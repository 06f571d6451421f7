"""Short fetch waits while records flow, long ones after a quiet spell (runtime/fetch_pace.py)."""

from types import SimpleNamespace

from runtime.fetch_pace import FetchPace


def make(idle_after_s=2.0):
    now = [100.0]
    consumer = SimpleNamespace(_fetcher=SimpleNamespace(_fetch_max_wait_ms=50))
    pace = FetchPace(consumer, busy_ms=50, idle_ms=500, idle_after_s=idle_after_s, clock=lambda: now[0])
    return pace, consumer._fetcher, now


def test_quiet_consumer_waits_longer_and_first_record_switches_back():
    pace, fetcher, now = make()
    pace.saw(False)
    assert fetcher._fetch_max_wait_ms == 50  # not quiet long enough yet
    now[0] += 2.5
    pace.saw(False)
    assert fetcher._fetch_max_wait_ms == 500 and pace.idle
    pace.saw(True)
    assert fetcher._fetch_max_wait_ms == 50 and not pace.idle


def test_records_keep_the_short_wait():
    pace, fetcher, now = make()
    for _ in range(10):
        now[0] += 1.0
        pace.saw(True)
        now[0] += 1.0
        pace.saw(False)
    assert fetcher._fetch_max_wait_ms == 50


def test_idle_wait_never_shorter_than_busy_and_no_fetcher_is_harmless():
    pace = FetchPace(SimpleNamespace(), busy_ms=200, idle_ms=100, idle_after_s=0.0)
    assert pace.idle_ms == 200
    pace.saw(False)  # a consumer not started yet has no fetcher: nothing to set
    assert pace.idle


def test_a_lingering_consumer_asks_for_one_byte_while_idle_and_its_min_bytes_while_busy():
    now = [100.0]
    fetcher = SimpleNamespace(_fetch_max_wait_ms=50, _fetch_min_bytes=65536)
    pace = FetchPace(SimpleNamespace(_fetcher=fetcher), busy_ms=50, idle_ms=500, busy_min_bytes=65536,
                     clock=lambda: now[0])
    now[0] += 2.5
    pace.saw(False)
    assert (fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes) == (500, 1)  # the first record comes at once
    pace.saw(True)
    assert (fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes) == (50, 65536)  # a batch per 50 ms at most
