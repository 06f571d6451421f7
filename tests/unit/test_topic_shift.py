"""A message that announces a change of subject does not get the current topic's follow-up bonus."""

from __future__ import annotations

import pytest

from domain.topics.shift import announces_new_subject
from memory_agent.demo import sample_rounds
from core.embeddings import make_embedder
from core.settings import Settings
from streams.topics_memory import TopicConfig
from domain.topics.state import TopicsState
from domain.topics.fold import step
from domain.topics.protocol import UserMessage


@pytest.mark.parametrize(("text", "shift"), [
    ("Different subject: I'm training for the Lyon half marathon.", True),
    ("Now something else entirely: my wife and I are planning a trip.", True),
    ("Back to the bookshop API. The checkout flow is next.", True),
    ("Ok, so, changing the subject: what about taxes?", True),
    ("On another note, the cat is fine.", True),
    ("Anna: By the way, my sister got engaged.", True),
    ("Unrelated question: how do I bake bread?", True),
    ("What should I eat the evening before the race?", False),
    ("Which part of Kyoto should we stay in?", False),
    ("I went back to bed after the alarm.", False),  # "back to" not at the start
    ("Something broke in the checkout.", False),
    ("A different approach would be to cache it.", False),
])
def test_announces_new_subject(text: str, shift: bool) -> None:
    assert announces_new_subject(text) is shift


async def test_the_demo_subjects_become_their_own_topics_at_the_defaults() -> None:
    """Issue 12: the demo's four sessions (bookshop API, half marathon, Japan, back to the bookshop)
    at the shipped defaults and offline MiniLM: no topic mixes two subjects, the running and the
    Japan sessions are one topic each, and "Back to the bookshop API" returns to the bookshop's
    first topic. (Its sub-questions — login, hosting, emails — may start small topics of their own.)"""
    rounds = sample_rounds()
    subjects = ["shop"] * 9 + ["run"] * 6 + ["japan"] * 6 + ["shop"] * 5
    assert len(rounds) == len(subjects)
    settings = Settings()
    vectors = await make_embedder(settings).embed_documents([user for user, _ in rounds])
    config, state, topics = TopicConfig.from_settings(settings.topics), TopicsState("c"), []
    for i, ((user, _), vector) in enumerate(zip(rounds, vectors)):
        state, _ = step(state, UserMessage(2 * i, user, vector, float(i)), float(i), config)
        topics.append(state.active_topic_id)
    owners: dict[str, set[str]] = {}
    for subject, topic in zip(subjects, topics):
        owners.setdefault(topic, set()).add(subject)
    assert all(len(s) == 1 for s in owners.values()), owners
    assert len(set(topics[9:15])) == 1 and len(set(topics[15:21])) == 1
    assert topics[21] == topics[0]
    assert len(owners) <= 2 * len(set(subjects)) + 2
