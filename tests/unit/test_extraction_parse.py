"""Parsing the chunk/facts answer and the gate strictly; the offline gate and extractor."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from streams.facts.extraction import (
    OFFLINE_EXTRACTOR,
    ExtractedFact,
    MalformedExtraction,
    extract_offline,
    heuristic_gate,
    parse_extraction,
    parse_gate,
)


@dataclass(frozen=True)
class Msg:
    role: str
    content: str


def conversation(*lines: str) -> list[Msg]:
    """Alternating user / assistant messages."""
    return [Msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(lines)]


# --- parse_extraction ----------------------------------------------------------------------------

def test_valid_seed_003_answer():
    raw = json.dumps({"summary": " They talked about Lisbon. ",
                      "facts": [{"category": "hobby", "content": "Plays  the guitar."}]})
    result = parse_extraction(raw)
    assert result.summary == "They talked about Lisbon."
    assert result.facts == (ExtractedFact("hobby", "Plays the guitar.", 3, (), "fact"),)
    assert result.extractor == "llm" and result.remapped_categories == ()


def test_seed_001_extensions_are_parsed_and_normalised():
    data = {"summary": "s", "facts": [
        {"category": "Preference", "content": "Prefers tea", "importance": 5,
         "tags": ["Drinks", " tea ", "drinks", ""], "memory_type": "preference"},
        {"category": "other", "content": "x", "importance": "9", "memory_type": "gossip"},
        {"category": "other", "content": "y", "importance": 0.2}]}
    facts = parse_extraction(data).facts
    assert facts[0] == ExtractedFact("preference", "Prefers tea", 5, ("drinks", "tea"), "preference")
    assert (facts[1].importance, facts[1].memory_type) == (5, "general")  # clamped; unknown type
    assert facts[2].importance == 1


def test_empty_facts_list_is_valid():
    assert parse_extraction('{"summary": "Small talk.", "facts": []}').facts == ()


def test_unknown_category_maps_to_other_and_is_reported():
    result = parse_extraction({"summary": "s", "facts": [{"category": "location", "content": "Lives in Lisbon"},
                                                         {"content": "No category"}]})
    assert [f.category for f in result.facts] == ["other", "other"]
    assert result.remapped_categories == ("location", "None")


def test_duplicate_facts_in_one_answer_count_once_and_a_json_fence_is_tolerated():
    raw = '```json\n{"summary": "s", "facts": [{"category": "habit", "content": "Runs daily"},' \
          ' {"category": "habit", "content": "runs daily"}]}\n```'
    assert len(parse_extraction(raw).facts) == 1


@pytest.mark.parametrize(
    ("raw", "reason"),
    [("not json at all", "not JSON"),
     ('{"summary": "s", "facts": [', "not JSON"),
     ("[1, 2]", "expected a JSON object"),
     ('{"facts": []}', "missing or empty summary"),
     ('{"summary": "   ", "facts": []}', "missing or empty summary"),
     ('{"summary": 3, "facts": []}', "missing or empty summary"),
     ('{"summary": "s"}', "facts is missing or not a list"),
     ('{"summary": "s", "facts": {"category": "hobby"}}', "facts is missing or not a list"),
     ('{"summary": "s", "facts": ["likes tea"]}', "facts[0] is not an object"),
     ('{"summary": "s", "facts": [{"category": "hobby"}]}', "facts[0] has no content"),
     ('{"summary": "s", "facts": [{"category": "hobby", "content": " "}]}', "facts[0] has no content"),
     ('{"summary": "s", "facts": [{"content": "a", "importance": "high"}]}', "importance must be"),
     ('{"summary": "s", "facts": [{"content": "a", "importance": true}]}', "importance must be"),
     ('{"summary": "s", "facts": [{"content": "a", "tags": "x"}]}', "tags must be a list")],
)
def test_malformed_answers_raise_with_a_reason(raw, reason):
    with pytest.raises(MalformedExtraction) as caught:
        parse_extraction(raw)
    assert reason in caught.value.reason


# --- parse_gate -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "expected"),
    [('{"worth_remembering": true, "reason": "user moved city"}', (True, "user moved city")),
     ('{"worth_remembering": false, "reason": "greetings"}', (False, "greetings")),
     ('{"worth_remembering": "yes"}', (True, "")),
     ({"worth_remembering": "False", "reason": 7}, (False, ""))],
)
def test_gate_answers(raw, expected):
    assert parse_gate(raw) == expected


@pytest.mark.parametrize("raw", ['{"reason": "x"}', '{"worth_remembering": "maybe"}',
                                 '{"worth_remembering": 1}', "yes"])
def test_malformed_gate_answers_raise(raw):
    with pytest.raises(MalformedExtraction):
        parse_gate(raw)


# --- heuristic gate and offline extractor -------------------------------------------------------

@pytest.mark.parametrize(
    ("lines", "worth"),
    [(("hi", "Hello! How can I help?", "ok thanks", "You're welcome.", "bye"), False),
     (("hey there", "Hi!", "cool, got it", "Great."), False),
     (("I live in Lisbon.", "Nice city!"), True),
     (("What's the capital of France?", "Paris."), False),
     (("Could you compare postgres replication slots with logical decoding output plugins", "Sure"), True),
     (("Great answer!", "I prefer tea over coffee."), False)],  # only the user's words count
)
def test_heuristic_gate(lines, worth):
    verdict, reason = heuristic_gate(conversation(*lines))
    assert verdict is worth and reason


def test_offline_extractor_finds_first_person_facts_and_ignores_chatter():
    result = extract_offline(conversation(
        "hi", "Hello!",
        "I live in Lisbon. My daughter is called Ana. I prefer tea.", "Lovely, tell me more.",
        "I work as a nurse at the city hospital.", "That sounds demanding.",
        "ok thanks", "Anytime!",
        "I think so? Can you help me plan a trip?", "Of course."))
    assert [(f.category, f.content) for f in result.facts] == [
        ("other", "The user lives in Lisbon."),
        ("relationship", "The user's daughter is called Ana."),
        ("preference", "The user prefers tea."),
        ("occupation", "The user works as a nurse at the city hospital."),
    ]
    assert [(f.importance, f.memory_type) for f in result.facts] == [
        (2, "fact"), (4, "fact"), (2, "preference"), (4, "fact")]
    assert result.facts[1].tags[:2] == ("daughter", "ana")
    assert result.extractor == OFFLINE_EXTRACTOR
    assert "ok thanks" not in result.summary and "nurse" in result.summary


@pytest.mark.parametrize(
    ("sentence", "category"),
    [("I was born in 1980 in Porto.", "milestone"), ("My son plays football.", "relationship"),
     ("I usually run every morning.", "habit"), ("I love hiking in the mountains.", "hobby"),
     ("I'm a very shy person.", "personality"), ("I have two cats.", "other")],
)
def test_offline_categories_follow_the_keyword_rules(sentence, category):
    facts = extract_offline([Msg("user", sentence)]).facts
    assert [f.category for f in facts] == [category]
    assert facts[0].content.startswith(("The user ", "The user's "))


@pytest.mark.parametrize("sentence", ["I like it.", "I love you!", "My bad.", "I was wondering about that.",
                                      "My question is simple?", "I think I live in Lisbon.",
                                      "I need help with my Python code.", "I'd like to know how sorting works.",
                                      "I'm not sure what the error means."])
def test_offline_extractor_skips_empty_or_conversational_first_person_sentences(sentence):
    assert extract_offline([Msg("user", sentence)]).facts == ()


def test_curly_apostrophes_are_understood():
    facts = extract_offline([Msg("user", "I\u2019m learning Portuguese in the evenings.")]).facts
    assert [f.content for f in facts] == ["The user is learning Portuguese in the evenings."]


def test_offline_extractor_on_chatter_only_is_deterministic_and_factless():
    chat = conversation("ok thanks", "You're welcome!")
    first, second = extract_offline(chat), extract_offline(chat)
    assert first == second and first.facts == () and first.summary
