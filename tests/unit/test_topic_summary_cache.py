"""The topic summaries' LLM cache: the key covers exactly what the prompt holds, hits skip the LLM,
and nothing failed or empty is ever stored."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from core.llm.port import ChatMessage, LlmError, MalformedOutput
from core.settings import LlmSettings, Settings
from streams.topics_memory.summarize import (
    TOPIC_SUMMARY_KIND,
    CachedTopicSummarizer,
    ExtractiveTopicSummarizer,
    LlmTopicSummarizer,
    TopicSummary,
    TopicSummaryCall,
    make_topic_summarizer,
    topic_summary_key,
)

MESSAGES = [ChatMessage(4, "user", "The brakes grind."), ChatMessage(5, "assistant", "Worn pads.")]
CALL = TopicSummaryCall("Car brakes", "The car is old.", MESSAGES, 5)


def key(call: TopicSummaryCall = CALL, model: str = "m", prompt_version: str = "topic-summary-v1") -> str:
    return topic_summary_key(model, prompt_version, call)


def test_the_key_is_stable_for_the_same_inputs():
    again = TopicSummaryCall("Car brakes", "The car is old.", [ChatMessage(4, "user", "The brakes grind."),
                                                               ChatMessage(5, "assistant", "Worn pads.")], 5)
    assert key(again) == key(CALL) and len(key(CALL)) == 64
    # The messages' dates are not in the prompt, so not in the key either.
    new_year = datetime(2026, 1, 1, tzinfo=timezone.utc)
    dated = replace(CALL, messages=[replace(m, occurred_at=new_year) for m in MESSAGES])
    assert key(dated) == key(CALL)


@pytest.mark.parametrize("changed", [
    replace(CALL, title="Car brakes!"),
    replace(CALL, previous_summary=None),
    replace(CALL, previous_summary="The car is new."),
    replace(CALL, upto_seq=6),
    replace(CALL, messages=MESSAGES[:1]),
    replace(CALL, messages=[MESSAGES[0], replace(MESSAGES[1], seq=6)]),
    replace(CALL, messages=[MESSAGES[0], replace(MESSAGES[1], role="user")]),
    replace(CALL, messages=[MESSAGES[0], replace(MESSAGES[1], content="Worn pads!")]),
    replace(CALL, messages=MESSAGES[::-1]),
], ids=["title", "no-previous", "previous", "upto", "fewer", "seq", "role", "content", "order"])
def test_the_key_changes_with_every_input(changed):
    assert key(changed) != key(CALL)


def test_the_key_changes_with_the_model_and_the_prompt_version_and_is_its_own_kind():
    assert len({key(), key(model="m2"), key(prompt_version="topic-summary-v2")}) == 3
    from core.llm.cache import cache_key
    window_like = {"previous": CALL.previous_summary, "messages": [[m.seq, m.role, m.content] for m in MESSAGES],
                   "window": [4, 5]}
    assert cache_key("summary", "m", "topic-summary-v1", window_like) != key()


class MemoryCache:
    """LlmCache's interface in memory, recording every lookup."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.lookups: list[tuple[str, object]] = []
        self.counts: dict[str, list[int]] = {}
        self.closed = False

    async def get(self, key, kind):
        self.lookups.append(("get", kind))
        found = self.rows.get(key)
        if found is not None:
            self.counts.setdefault(kind, [0, 0])[0] += 1
        return found

    async def get_many(self, keys, kind):
        self.lookups.append(("get_many", kind))
        found = {k: self.rows[k] for k in keys if k in self.rows}
        self.counts.setdefault(kind, [0, 0])[0] += len(found)
        return found

    async def put(self, key, kind, model, prompt_version, output):
        assert (kind, model, prompt_version) == (TOPIC_SUMMARY_KIND, "fake-llm", "topic-summary-v1")
        self.rows.setdefault(key, output)
        self.counts.setdefault(kind, [0, 0])[1] += 1

    async def forget(self, key):
        self.rows.pop(key, None)

    async def aclose(self):
        self.closed = True


class ScriptedLlm:
    """Stands in for LlmTopicSummarizer: answers (or raises) what the test scripts, in order."""

    model, prompt_version = "fake-llm", "topic-summary-v1"

    def __init__(self, *answers) -> None:
        self.answers, self.calls, self.closed = list(answers), [], False

    async def summarize(self, title, previous_summary, messages, upto_seq):
        self.calls.append(TopicSummaryCall(title, previous_summary, messages, upto_seq))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return TopicSummary(answer, self.model, self.prompt_version)

    async def aclose(self):
        self.closed = True


async def summarize(summarizer, call: TopicSummaryCall = CALL) -> TopicSummary:
    return await summarizer.summarize(call.title, call.previous_summary, call.messages, call.upto_seq)


async def test_the_second_call_with_the_same_inputs_is_answered_by_the_cache():
    llm, cache = ScriptedLlm("Brakes worn.", "Other."), MemoryCache()
    summarizer = CachedTopicSummarizer(llm, cache)
    first = await summarize(summarizer)
    assert await summarize(summarizer) == first == TopicSummary("Brakes worn.", "fake-llm", "topic-summary-v1")
    assert llm.calls == [CALL] and cache.counts == {TOPIC_SUMMARY_KIND: [1, 1]}
    assert (await summarize(summarizer, replace(CALL, upto_seq=9))).text == "Other."  # other inputs: asked
    assert len(llm.calls) == 2
    await summarizer.aclose()
    assert llm.closed and cache.closed


async def test_a_failed_or_empty_answer_is_never_stored_and_the_error_reaches_the_caller():
    llm = ScriptedLlm(LlmError("bad key", retryable=False), MalformedOutput("empty topic summary"), "  ", "Good.")
    cache = MemoryCache()
    summarizer = CachedTopicSummarizer(llm, cache)
    with pytest.raises(LlmError) as failed:
        await summarize(summarizer)
    assert failed.value.retryable is False and cache.rows == {}
    with pytest.raises(MalformedOutput):
        await summarize(summarizer)
    assert (await summarize(summarizer)).text == "  " and cache.rows == {}  # returned as the inner gave it
    assert (await summarize(summarizer)).text == "Good." and len(cache.rows) == 1
    assert len(llm.calls) == 4 and cache.counts == {TOPIC_SUMMARY_KIND: [0, 1]}


async def test_an_entry_that_is_not_a_summary_is_dropped_and_asked_again():
    llm, cache = ScriptedLlm("Fresh."), MemoryCache()
    summarizer = CachedTopicSummarizer(llm, cache)
    cache.rows[summarizer.key(CALL)] = {"text": "", "model": "fake-llm", "prompt_version": "topic-summary-v1"}
    assert await summarizer.cached_many([CALL]) == [None]
    assert (await summarize(summarizer)).text == "Fresh." and llm.calls == [CALL]
    assert cache.rows[summarizer.key(CALL)]["text"] == "Fresh."


async def test_cached_many_answers_many_calls_with_one_lookup():
    llm, cache = ScriptedLlm("One.", "Two."), MemoryCache()
    summarizer = CachedTopicSummarizer(llm, cache)
    other = replace(CALL, title="Japan trip")
    await summarize(summarizer)
    await summarize(summarizer, other)
    cache.lookups.clear()
    missing = replace(CALL, previous_summary=None)
    found = await summarizer.cached_many([other, missing, CALL, other])
    assert [s and s.text for s in found] == ["Two.", None, "One.", "Two."]
    assert cache.lookups == [("get_many", TOPIC_SUMMARY_KIND)]
    assert await summarizer.cached_many([]) == [] and len(cache.lookups) == 1
    assert len(llm.calls) == 2


def test_the_llm_sits_behind_the_cache_unless_it_is_off_and_the_offline_fallback_is_never_cached():
    on = make_topic_summarizer(Settings(llm=LlmSettings(provider="openai", model="m-1", base_url="http://x/v1")))
    assert isinstance(on, CachedTopicSummarizer) and isinstance(on.inner, LlmTopicSummarizer)
    assert (on.model, on.prompt_version) == ("m-1", "topic-summary-v1")
    off = make_topic_summarizer(Settings(llm=LlmSettings(provider="openai", base_url="http://x/v1",
                                                         cache_enabled=False)))
    assert isinstance(off, LlmTopicSummarizer)
    assert isinstance(make_topic_summarizer(Settings()), ExtractiveTopicSummarizer)
