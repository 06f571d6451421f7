"""core/telemetry.py when tracing is off (the default): nothing is made, nothing is added."""

from __future__ import annotations

import pytest

from core import telemetry
from core.settings import Settings, TelemetrySettings


def test_off_by_default_and_every_hook_is_a_no_op() -> None:
    assert not telemetry.enabled()
    assert Settings().telemetry.enabled is False
    assert telemetry.configure(Settings(), "api") is None and not telemetry.enabled()
    first, second = telemetry.span("a", {"k": 1}), telemetry.span("b", kind="consumer")
    assert first is second  # one shared no-op context: no object per call
    with first as current:
        assert current is None
    existing = [("x", b"1")]
    assert telemetry.headers(existing) is existing and telemetry.headers() is None  # records go out unchanged
    assert telemetry.context_of([("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]) is None
    assert telemetry.links_of([[("traceparent", b"x")]]) == []
    assert telemetry.http_context([(b"traceparent", b"x")]) is None


async def test_traced_is_the_plain_await_when_off() -> None:
    async def answer() -> int:
        return 42
    assert await telemetry.traced("x", answer()) == 42


@pytest.mark.parametrize(("enabled", "sdk_disabled", "wanted"), [
    (False, None, False), (True, None, True), (True, "true", False), (True, "TRUE", False), (True, "false", True)])
def test_wanted_follows_the_setting_and_otel_sdk_disabled(monkeypatch, enabled, sdk_disabled, wanted) -> None:
    if sdk_disabled is None:
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    else:
        monkeypatch.setenv("OTEL_SDK_DISABLED", sdk_disabled)
    assert telemetry.wanted(Settings(telemetry=TelemetrySettings(enabled=enabled))) is wanted


def test_sample_ratio_is_a_share() -> None:
    with pytest.raises(ValueError):
        TelemetrySettings(sample_ratio=1.5)
