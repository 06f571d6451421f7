"""Pure parts of the surfaces: exit codes, table layout, time windows, MCP key headers, connection defaults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_agent.api_client import ApiError, Connection
from memory_agent.cli_memory import AUTH, NOT_FOUND, SERVER, USAGE, exit_code, table
from memory_agent.mcp_server import request_key
from core.settings import ApiSettings, ClientSettings, Settings
from retrieval.lookup import _in_window
from retrieval.search import SearchRow

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)


@pytest.mark.parametrize("status, code", [(404, NOT_FOUND), (401, AUTH), (403, AUTH), (400, USAGE), (422, USAGE),
                                          (413, USAGE), (429, SERVER), (500, SERVER), (503, SERVER), (0, SERVER)])
def test_exit_codes_mean_something(status, code):
    assert exit_code(status) == code


def test_table_aligns_columns_and_does_not_pad_the_last():
    lines = table([["1", "fact", "short"], ["10", "chunk", "a longer one"]], ["#", "kind", "content"]).splitlines()
    assert lines[0] == "#   kind   content"
    assert lines[1] == "--  -----  ------------"
    assert lines[2] == "1   fact   short" and lines[3] == "10  chunk  a longer one"


def row(start: datetime, end: datetime | None = None) -> SearchRow:
    return SearchRow(kind="chunk", item_id="x", content="c", cosine=0.5, keyword_score=0.0, in_vector=True,
                     in_keyword=False, surfaced_seqs=None, timestamp=end or start, occurred_start=start,
                     occurred_end=end or start)


def test_time_window_keeps_items_whose_source_overlaps_it():
    week = row(NOW - timedelta(days=7), NOW - timedelta(days=1))
    assert _in_window(week, None, None)
    assert _in_window(week, NOW - timedelta(days=3), None)  # overlaps: ends after since
    assert not _in_window(week, NOW, None)
    assert _in_window(week, None, NOW - timedelta(days=5))  # started before until
    assert not _in_window(week, None, NOW - timedelta(days=8))


def test_mcp_http_key_from_either_header():
    assert request_key({"x-api-key": "k1"}) == "k1"
    assert request_key({"authorization": "Bearer k2"}) == "k2"
    assert request_key({"authorization": "bearer  k3 "}) == "k3"
    assert request_key({"authorization": "Basic abc"}) is None
    assert request_key({"authorization": "Bearer "}) is None
    assert request_key({}) is None


def test_connection_defaults_flags_then_client_settings_then_the_api_settings():
    settings = Settings(environment="test", api=ApiSettings(api_keys={"sha256:" + "0" * 64: "t", "plain": "t"},
                                                            port=9000))
    default = Connection.from_settings(settings)
    assert (default.url, default.api_key, default.user) == ("http://127.0.0.1:9000", "plain", None)
    configured = settings.model_copy(update={"client": ClientSettings(url="http://api:1/", api_key="k", user="u")})
    assert Connection.from_settings(configured).headers() == {"X-API-Key": "k", "X-User-Id": "u"}
    assert Connection.from_settings(configured).url == "http://api:1"
    flagged = Connection.from_settings(configured, url="http://x", api_key="f", user="v")
    assert (flagged.url, flagged.api_key, flagged.user) == ("http://x", "f", "v")


def test_api_error_message_unwraps_the_problem_shapes():
    assert ApiError(404, {"detail": "fact 'x' not found"}).message == "fact 'x' not found"
    assert ApiError(422, {"detail": {"reason": "invalid_request", "message": "k: too big"}}).message == "k: too big"
    assert ApiError(0, "cannot reach").message == "cannot reach"
