"""Backoff policy and JSON answer parsing of the LLM provider."""

from __future__ import annotations

import random

import pytest

from core.llm import MalformedOutput, parse_json_object
from core.llm.retry import RetryPolicy


def test_backoff_is_exponential_jittered_and_capped():
    policy = RetryPolicy(max_retries=10, backoff_base_s=0.5, backoff_max_s=4.0)
    rng = random.Random(7)
    for attempt, ceiling in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(ceiling * 0.5 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling * 0.3  # jitter actually spreads


def test_retry_after_raises_the_delay_within_the_cap():
    policy = RetryPolicy(max_retries=3, backoff_base_s=0.1, backoff_max_s=2.0)
    rng = random.Random(1)
    assert policy.delay(0, rng, retry_after_s=1.5) == 1.5
    assert policy.delay(0, rng, retry_after_s=60.0) == 2.0


def test_json_object_is_parsed_even_inside_a_code_fence():
    assert parse_json_object('{"a": 1}') == {"a": 1}
    assert parse_json_object('```json\n{"summary": "x", "facts": []}\n```') == {
        "summary": "x",
        "facts": [],
    }


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '"text"', '{"a": 1', ""])
def test_non_object_json_is_malformed(content):
    with pytest.raises(MalformedOutput):
        parse_json_object(content)
