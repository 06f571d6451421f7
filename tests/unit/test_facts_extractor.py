"""The two tiers: which gate runs, what a "not worth it" chunk records, failures and malformed output."""

from __future__ import annotations

import pytest

from core.llm.port import ChatMessage, JsonOutput, LlmError
from core.settings import FactsSettings, LlmSettings, Settings
from streams.facts.extraction import OFFLINE_EXTRACTOR, MalformedExtraction
from streams.facts.extractor import ChunkExtractor, gate_method

FACTFUL = [ChatMessage(0, "user", "I live in Lisbon with my wife."), ChatMessage(1, "assistant", "Nice city!")]
CHATTER = [ChatMessage(0, "user", "hi"), ChatMessage(1, "assistant", "Hello!"), ChatMessage(2, "user", "ok thanks")]


class ScriptedLlm:
    """A JsonCompleter answering per prompt version; an Exception instance is raised instead."""

    model = "big"

    def __init__(self, **answers) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str | None]] = []

    async def complete_json(self, prompt_version, variables, *, model=None, validate=None):
        self.calls.append((prompt_version, model))
        answer = self.answers[prompt_version.split("-v")[0].replace("-", "_")]
        if isinstance(answer, Exception):
            raise answer
        if validate is not None:
            validate(answer)
        return JsonOutput(answer, model or self.model, prompt_version)


def online(**facts) -> Settings:
    return Settings(llm=LlmSettings(provider="openai", model="big"), facts=FactsSettings(**facts))


@pytest.mark.parametrize("settings, has_llm, expected", [
    (Settings(), False, ("heuristic", None)),
    (online(), True, ("heuristic", None)),  # auto: no distinct cheap model configured
    (online(gate_model="small"), True, ("llm", "small")),
    (online(gate_model="big"), True, ("heuristic", None)),
    (Settings(llm=LlmSettings(provider="openai", model="big", gate_model="small")), True, ("llm", "small")),
    (online(gate="llm"), True, ("llm", "big")),
    (online(gate="llm"), False, ("heuristic", None)),  # offline: no model to ask
    (online(gate="off", gate_model="small"), True, ("off", None)),
    (online(gate="heuristic", gate_model="small"), True, ("heuristic", None)),
])
def test_gate_method_per_settings(settings, has_llm, expected):
    assert gate_method(settings, ScriptedLlm() if has_llm else None) == expected


async def test_llm_gate_says_no_so_the_expensive_model_is_never_called_and_no_facts_are_kept():
    llm = ScriptedLlm(gate={"worth_remembering": False, "reason": "small talk"}, chunk_facts=AssertionError())
    out = await ChunkExtractor(online(gate_model="small"), llm).extract(FACTFUL)
    assert llm.calls == [("gate-v1", "small")]
    assert out.result.facts == () and out.result.summary and out.model == OFFLINE_EXTRACTOR
    assert (out.gate.worth_remembering, out.gate.method, out.gate.model, out.gate.reason) == (
        False, "llm", "small", "small talk")


async def test_llm_gate_says_yes_then_one_extraction_call_with_the_extraction_model():
    llm = ScriptedLlm(gate={"worth_remembering": True, "reason": "a fact"}, chunk_facts={
        "summary": "Lisbon.", "facts": [{"category": "other", "content": "Lives in Lisbon.", "importance": 5,
                                         "tags": ["Home"]}]})
    out = await ChunkExtractor(online(gate_model="small", extraction_model="huge"), llm).extract(FACTFUL)
    assert llm.calls == [("gate-v1", "small"), ("chunk-facts-v3", "huge")]
    assert [(f.content, f.importance, f.tags) for f in out.result.facts] == [("Lives in Lisbon.", 5, ("home",))]
    assert (out.model, out.prompt_version, out.gate.method) == ("huge", "chunk-facts-v3", "llm")


async def test_a_failing_gate_fails_open():
    llm = ScriptedLlm(gate=LlmError("503", retryable=True), chunk_facts={"summary": "s", "facts": []})
    out = await ChunkExtractor(online(gate_model="small"), llm).extract(CHATTER)
    assert out.gate.worth_remembering and out.gate.method == "llm-failed-open"
    assert [c[0] for c in llm.calls] == ["gate-v1", "chunk-facts-v3"]


@pytest.mark.parametrize("answer, error", [
    ({"facts": []}, MalformedExtraction),
    ({"summary": "s", "facts": [{"category": "x"}]}, MalformedExtraction),
    (LlmError("bad key", retryable=False), LlmError),
])
async def test_malformed_or_failed_extraction_raises_so_nothing_is_recorded(answer, error):
    with pytest.raises(error):
        await ChunkExtractor(online(gate="off"), ScriptedLlm(chunk_facts=answer)).extract(FACTFUL)


async def test_heuristic_gate_skips_chatter_and_keeps_a_rule_summary():
    out = await ChunkExtractor(Settings(), None).extract(CHATTER)
    assert not out.gate.worth_remembering and out.gate.method == "heuristic"
    assert out.result.facts == () and out.result.extractor == OFFLINE_EXTRACTOR


async def test_offline_extraction_finds_first_person_facts():
    out = await ChunkExtractor(Settings(), None).extract(FACTFUL)
    assert out.gate.worth_remembering
    assert [f.content for f in out.result.facts] == ["The user lives in Lisbon with the user's wife."]
    assert (out.model, out.prompt_version) == (OFFLINE_EXTRACTOR, OFFLINE_EXTRACTOR)


async def test_facts_are_capped_per_chunk():
    answer = {"summary": "s", "facts": [{"category": "other", "content": f"Fact {i}."} for i in range(5)]}
    out = await ChunkExtractor(online(gate="off", max_facts_per_chunk=2), ScriptedLlm(chunk_facts=answer)).extract(
        FACTFUL)
    assert [f.content for f in out.result.facts] == ["Fact 0.", "Fact 1."]


class RecordingLlm(ScriptedLlm):
    def __init__(self, **answers) -> None:
        super().__init__(**answers)
        self.variables: list[dict] = []

    async def complete_json(self, prompt_version, variables, *, model=None, validate=None):
        self.variables.append(dict(variables))
        return await super().complete_json(prompt_version, variables, model=model, validate=validate)


async def test_llm_sees_dated_named_messages_and_related_memories_and_its_targets_map_to_fact_ids():
    from core.llm.prompts import load_prompt
    from streams.facts.offline import ExistingFact
    from tests.support.two_people import messages

    answer = {"summary": "Caroline moved to Porto.", "facts": [
        {"category": "milestone", "content": "Caroline lives in Porto.", "relation": "contradicts", "target": "F1"},
        {"category": "other", "content": "Caroline has a cat.", "relation": "duplicate", "target": "F9"},
        {"category": "other", "content": "Melanie paints.", "relation": "new", "target": None}]}
    llm = RecordingLlm(chunk_facts=answer)
    existing = [ExistingFact("fact-lisbon", "Caroline lives in Lisbon.")]
    out = await ChunkExtractor(online(gate="off"), llm).extract(messages(), existing)
    sent = llm.variables[0]
    assert "[2] 8 May 2023, Caroline: I went to a LGBTQ support group yesterday (7 May 2023)" in sent["messages"]
    assert "trimmed" not in sent["messages"] and "sunny" not in sent["messages"]  # system, tool left out
    assert sent["existing"] == "[F1] Caroline lives in Lisbon."
    assert load_prompt("chunk-facts-v3").variables == {"messages", "existing"}
    assert [(f.relation, f.target_fact_id) for f in out.result.facts] == [
        ("contradicts", "fact-lisbon"), (None, None), (None, None)]  # F9 was never shown
