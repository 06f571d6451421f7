"""OpenAiLlm against a real local HTTP server speaking the OpenAI API."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.llm import ChatMessage, LlmError, MalformedOutput, OpenAiLlm, load_prompt
from tests.support.fake_openai import FakeOpenAI, compact_summary, fake_openai  # noqa: F401

MESSAGES = [
    ChatMessage(14, "user", "My Netgear R7000 drops WiFi every evening."),
    ChatMessage(15, "assistant", "Try channel 6 and firmware 1.0.12."),
]


def make_llm(fake: FakeOpenAI, **overrides) -> OpenAiLlm:
    return OpenAiLlm.from_settings(fake.llm_settings(**overrides))


async def test_summary_request_carries_prompt_summary_messages_and_window(fake_openai):
    llm = make_llm(fake_openai)
    out = await llm.summarize_window("The user lives in Lyon.", MESSAGES, 2, 15)

    (request,) = fake_openai.chat_requests
    assert request.model == "fake-llm"
    assert request.system_content == load_prompt("summary-v1").system
    user = request.user_content
    assert "The user lives in Lyon." in user
    assert "[14] user: My Netgear R7000 drops WiFi every evening." in user
    assert "[15] assistant: Try channel 6 and firmware 1.0.12." in user
    assert "drop anything from before seq 2" in user
    assert "Window: messages seq 2 to seq 15." in user
    assert not request.json_mode
    assert out.text == compact_summary(request)
    assert (out.model, out.prompt_version) == ("fake-llm", "summary-v1")
    assert (llm.model, llm.prompt_version) == ("fake-llm", "summary-v1")
    await llm.aclose()


async def test_first_summary_says_there_is_no_previous_one(fake_openai):
    await make_llm(fake_openai).summarize_window(None, MESSAGES, 0, 15)
    assert "(none: this is the first summary)" in fake_openai.chat_requests[0].user_content


async def test_slow_answer_within_timeout_succeeds(fake_openai):
    fake_openai.latency_s = 0.3
    started = time.monotonic()
    out = await make_llm(fake_openai, timeout_s=2.0).summarize_window(None, MESSAGES, 0, 15)
    assert time.monotonic() - started >= 0.3
    assert out.text.startswith("FAKE SUMMARY:")
    assert len(fake_openai.chat_requests) == 1


async def test_two_server_errors_are_retried_then_succeed(fake_openai):
    fake_openai.fail_next(2, status=500)
    out = await make_llm(fake_openai, max_retries=3).summarize_window(None, MESSAGES, 0, 15)
    assert out.text.startswith("FAKE SUMMARY:")
    assert len(fake_openai.chat_requests) == 3


async def test_rate_limit_is_retried_after_retry_after(fake_openai):
    fake_openai.fail_next(1, status=429, retry_after=0.08)
    started = time.monotonic()
    await make_llm(fake_openai).summarize_window(None, MESSAGES, 0, 15)
    assert len(fake_openai.chat_requests) == 2
    # backoff_max_s is 0.1 in test settings: the server's 0.08 s wins over ~0.01 s backoff
    assert time.monotonic() - started >= 0.08


async def test_persistent_server_errors_give_retryable_error_after_all_retries(fake_openai):
    fake_openai.fail_next(10, status=503)
    with pytest.raises(LlmError) as caught:
        await make_llm(fake_openai, max_retries=2).summarize_window(None, MESSAGES, 0, 15)
    assert caught.value.retryable is True
    assert not isinstance(caught.value, MalformedOutput)
    assert len(fake_openai.chat_requests) == 3


async def test_bad_request_is_not_retried(fake_openai):
    fake_openai.fail_next(1, status=400)
    with pytest.raises(LlmError) as caught:
        await make_llm(fake_openai, max_retries=3).summarize_window(None, MESSAGES, 0, 15)
    assert caught.value.retryable is False
    assert len(fake_openai.chat_requests) == 1


async def test_hanging_server_times_out_after_retries(fake_openai):
    fake_openai.hang_next(5, seconds=10.0)
    llm = make_llm(fake_openai, timeout_s=0.3, max_retries=1)
    started = time.monotonic()
    with pytest.raises(LlmError) as caught:
        await llm.summarize_window(None, MESSAGES, 0, 15)
    elapsed = time.monotonic() - started
    assert caught.value.retryable is True
    assert "Timeout" in str(caught.value)
    assert len(fake_openai.chat_requests) == 2
    assert 0.6 <= elapsed < 10.0  # two 0.3 s timeouts, not one 10 s hang (a bound, not a speed figure)


@pytest.mark.parametrize(
    "kind",
    ["non_json", "empty_content", "null_content", "empty_choices", "missing_choices", "not_json_body"],
)
async def test_malformed_json_answer_is_rejected(fake_openai, kind):
    fake_openai.malformed_next(1, kind)
    with pytest.raises(MalformedOutput):
        await make_llm(fake_openai).complete_json("gate-v1", {"messages": "[0] user: hi"})
    assert len(fake_openai.chat_requests) == 1  # malformed answers are not retried inside


@pytest.mark.parametrize("kind", ["empty_content", "empty_choices", "not_json_body"])
async def test_malformed_summary_is_rejected(fake_openai, kind):
    fake_openai.malformed_next(1, kind)
    with pytest.raises(MalformedOutput):
        await make_llm(fake_openai).summarize_window(None, MESSAGES, 0, 15)


async def test_complete_json_returns_object_model_and_prompt_version(fake_openai):
    answer = {"summary": "WiFi trouble.", "facts": [{"category": "other", "content": "Owns an R7000."}]}
    fake_openai.json_response = answer
    out = await make_llm(fake_openai).complete_json("chunk-facts-v1", {"messages": "[0] user: hi"})
    (request,) = fake_openai.chat_requests
    assert request.body["response_format"] == {"type": "json_object"}
    assert "[0] user: hi" in request.user_content
    assert (out.data, out.model, out.prompt_version) == (answer, "fake-llm", "chunk-facts-v1")


async def test_complete_json_uses_the_given_gate_model(fake_openai):
    fake_openai.json_response = {"worth_remembering": False, "reason": "small talk"}
    out = await make_llm(fake_openai).complete_json("gate-v1", {"messages": "x"}, model="fake-gate")
    assert fake_openai.chat_requests[0].model == "fake-gate"
    assert out.model == "fake-gate"
    assert out.data["worth_remembering"] is False


async def test_json_mode_can_be_turned_off_for_servers_without_it(fake_openai):
    fake_openai.json_response = {"ok": True}
    await make_llm(fake_openai, json_mode=False).complete_json("gate-v1", {"messages": "x"})
    assert "response_format" not in fake_openai.chat_requests[0].body


async def test_concurrency_limit_is_honoured(fake_openai):
    fake_openai.latency_s = 0.2
    llm = make_llm(fake_openai, concurrency=2)
    started = time.monotonic()
    await asyncio.gather(*(llm.summarize_window(None, MESSAGES, 0, 15) for _ in range(6)))
    assert fake_openai.max_in_flight == 2
    assert len(fake_openai.chat_requests) == 6
    assert time.monotonic() - started >= 0.2 * 3 - 0.05  # three waves of two


async def test_without_a_tight_limit_the_server_sees_parallel_calls(fake_openai):
    # The control for the test above: the server can see more than two at once.
    fake_openai.latency_s = 0.4
    llm = make_llm(fake_openai, concurrency=6)
    await asyncio.gather(*(llm.summarize_window(None, MESSAGES, 0, 15) for _ in range(6)))
    assert fake_openai.max_in_flight > 2


async def test_the_providers_of_one_endpoint_share_one_client_until_the_last_closes(fake_openai):
    window, facts, other = make_llm(fake_openai), make_llm(fake_openai), make_llm(fake_openai, timeout_s=9.0)
    await window.summarize_window(None, MESSAGES, 0, 15)
    fake_openai.json_response = {"ok": True}
    await facts.complete_json("gate-v1", {"messages": "x"})
    await other.summarize_window(None, MESSAGES, 0, 15)
    client = window._openai()
    assert facts._openai() is client and other._openai() is not client  # other options: a client of its own
    await window.aclose()
    assert not client.is_closed()  # facts still holds it
    await facts.complete_json("gate-v1", {"messages": "x"})
    await facts.aclose()
    assert client.is_closed()
    await other.aclose()
    assert len(fake_openai.chat_requests) == 4
