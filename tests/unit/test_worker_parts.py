"""What one worker process runs, and how replay progress reads the projectors' positions."""

from aiokafka import TopicPartition

from memory_agent.replay import _slowest
from memory_agent.settings import Settings
from memory_agent.worker import projectors


def test_the_worker_runs_the_messages_projector_and_those_of_the_enabled_systems_only():
    assert [p.name for p in projectors(Settings(systems=["window"]))] == ["messages", "memory"]
    names = {p.name for p in projectors(Settings(systems=["facts", "topics"]))}
    assert "messages" in names and "memory" not in names and len(names) == 3


def test_replay_progress_counts_what_the_slowest_projector_of_a_topic_applied():
    derived, source = "p.g.memory-events", "p.conversation-events"
    stored = {
        "messages": {TopicPartition(source, 0): 900},  # does not read the derived topic
        "memory": {TopicPartition(derived, 0): 40, TopicPartition(derived, 1): 60},
        "facts": {TopicPartition(derived, 0): 30, TopicPartition(derived, 1): 60},
    }
    assert _slowest(stored, derived) == 90
    assert _slowest({"messages": {TopicPartition(source, 0): 5}}, derived) == 0
