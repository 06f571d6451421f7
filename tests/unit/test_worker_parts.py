"""What one worker process runs, and how replay progress reads the projectors' positions."""

from aiokafka import TopicPartition

from memory_agent.cli_generations import _behind
from memory_agent.replay import behind, expected_projectors, slowest
from core.settings import Settings
from memory_agent.worker import faust_worker, projectors


def test_the_worker_runs_the_messages_projector_and_those_of_the_enabled_systems_only():
    lineage = ["lineage-topics", "lineage-served", "erasure"]  # always: neither depends on a system
    assert [p.name for p in projectors(Settings(systems=["window"]))] == ["messages", "message_index", *lineage,
                                                                          "memory"]
    names = {p.name for p in projectors(Settings(systems=["facts", "topics"]))}
    assert {"messages", "message_index", *lineage} <= names and "memory" not in names and len(names) == 7
    no_index = Settings(systems=["window"], retrieval={"index_messages": False})
    assert [p.name for p in projectors(no_index)] == ["messages", *lineage, "memory"]


def test_replay_progress_counts_what_the_slowest_projector_of_a_topic_applied():
    derived, source = "p.g.memory-events", "p.conversation-events"
    ends = {TopicPartition(derived, 0): 40, TopicPartition(derived, 1): 60, TopicPartition(source, 0): 900}
    expected = {"messages": [source], "memory": [derived], "facts": [source, derived]}
    stored = {
        "messages": {TopicPartition(source, 0): 900},  # does not read the derived topic
        "memory": {TopicPartition(derived, 0): 40, TopicPartition(derived, 1): 60},
        "facts": {TopicPartition(derived, 0): 30, TopicPartition(derived, 1): 60, TopicPartition(source, 0): 900},
    }
    assert slowest(stored, expected, ends, derived) == 90
    assert slowest(stored, expected, ends, source) == 900
    # A projector the worker runs but that has stored nothing yet stands at 0: not caught up.
    assert slowest({"messages": {TopicPartition(source, 0): 900}}, expected, ends, derived) == 0
    assert slowest({"messages": {TopicPartition(source, 0): 900}}, expected, ends, source) == 0
    # A projector the worker no longer runs does not hold the generation back.
    assert slowest({**stored, "retired": {TopicPartition(derived, 0): 1}}, expected, ends, derived) == 90
    # A position past the end read now (the end was read first) counts as the end.
    assert slowest({"memory": {TopicPartition(derived, 0): 45, TopicPartition(derived, 1): 60},
                    "facts": {TopicPartition(derived, 0): 41, TopicPartition(derived, 1): 70}},
                   {"memory": [derived], "facts": [derived]}, ends, derived) == 100


def test_replay_progress_names_what_is_behind_and_by_how_much():
    derived, source = "p.g.memory-events", "p.conversation-events"
    ends = {TopicPartition(derived, 0): 40, TopicPartition(source, 0): 900, TopicPartition(source, 1): 100}
    expected = {"messages": [source], "memory": [derived], "facts": [source, derived]}
    stored = {"messages": {TopicPartition(source, 0): 900, TopicPartition(source, 1): 100},
              "facts": {TopicPartition(source, 0): 850, TopicPartition(derived, 0): 30}}
    assert behind(stored, expected, ends) == {"messages": 0, "memory": 40, "facts": 50 + 100 + 10}
    assert _behind({"memory": 40, "facts": 1160}) == "facts 1,160, memory 40"
    assert _behind({}) == "-"


def test_replay_progress_expects_the_projectors_of_the_systems_the_generation_recorded():
    settings = Settings(systems=["window", "facts", "topics"])
    recorded = expected_projectors(settings, "g2", {"systems": ["window"], "index_messages": False})
    assert set(recorded) == {"messages", "lineage-topics", "lineage-served", "erasure", "memory"}
    assert recorded["memory"] == [settings.kafka.memory_topic("g2")]
    assert "topics" in expected_projectors(settings, "g1", {})  # not a replay: the settings say


def test_the_batch_replay_names_the_groups_and_changelog_as_the_faust_app_does(tmp_path):
    """The batch hands over through these names without building the app."""
    from streams.app import make_app
    from runtime.kafka_topics import agents_group, changelog_topic, stage_group, stages_group
    from streams.facts.agent import EXTRACT_STAGE
    from streams.processor import CONVERSATION_TABLE
    from streams.window.agent import SUMMARY_STAGE

    settings = Settings(generation="g7", state_dir=tmp_path, systems=("window", "facts"))
    app = make_app(settings)
    assert agents_group(settings) == app.conf.id
    for table in (CONVERSATION_TABLE,):  # one record per conversation, every system's state in it
        assert changelog_topic(settings, table) == app.tables[table].changelog_topic.get_topic_name()
    (runner,) = app.stage_runners  # one consumer for every stage; it adopts the groups the batch commits
    assert runner.group_id == stages_group(settings)
    assert set(runner.legacy_groups) == {stage_group(settings, SUMMARY_STAGE), stage_group(settings, EXTRACT_STAGE)}


def test_auto_replay_mode_is_batch_when_every_system_has_a_batch_replay():
    import pytest

    from memory_agent.replay import choose_mode

    window = Settings(systems=("window",), replay_until="2026-01-01T00:00:00Z")
    window_facts = Settings(systems=("window", "facts"), replay_until="2026-01-01T00:00:00Z")
    everything = Settings(replay_until="2026-01-01T00:00:00Z")
    assert choose_mode(window, "auto") == "batch"
    assert choose_mode(window_facts, "auto") == "batch"
    assert choose_mode(Settings(systems=("facts",), replay_until="2026-01-01T00:00:00Z"), "auto") == "batch"
    assert choose_mode(everything, "auto") == "batch"  # topics too, since the topic batch replay
    assert choose_mode(window, "stream") == "stream"
    with pytest.raises(Exception, match=r"needs replay_until"):
        choose_mode(Settings(), "batch")


def test_stages_and_projectors_processes_wait_for_the_batch_hand_over(monkeypatch):
    """`--role stages|projectors` beside a batch replay must not start before its hand-over
    (the batch commits the stages' group and writes the projections itself)."""
    import asyncio

    import memory_agent.batch_replay as batch
    from memory_agent.worker import wait_for_batch_hand_over

    answers = iter([False, False, True])
    asked: list[int] = []

    async def handed_over(settings, partitions):
        asked.append(partitions)
        return next(answers)

    async def partitions_of_the_log(settings):
        return 4

    monkeypatch.setattr(batch, "_handed_over", handed_over)
    monkeypatch.setattr(batch, "_partitions_of_the_log", partitions_of_the_log)
    replaying = Settings(replay_mode="batch", replay_until="2026-01-01T00:00:00Z")
    asyncio.run(wait_for_batch_hand_over(replaying, poll_s=0.001))
    assert asked == [4, 4, 4]
    asked.clear()
    asyncio.run(wait_for_batch_hand_over(Settings(replay_mode="stream", replay_until="2026-01-01T00:00:00Z")))
    asyncio.run(wait_for_batch_hand_over(Settings()))  # the live generation: nothing to wait for
    assert asked == []


def test_the_faust_worker_leaves_the_root_logger_at_the_configured_level():
    """faust's terminal spinner set the root logger to DEBUG at WARNING and above: every debug
    call of the worker then built a record its handler dropped."""
    import logging

    import faust

    app = faust.App("test-worker-logging", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    root = logging.Logger("probe-root", logging.WARNING)
    root.addHandler(logging.NullHandler())
    faust_worker(app, "WARNING").on_setup_root_logger(root, logging.WARNING)
    assert root.level == logging.WARNING and not root.isEnabledFor(logging.DEBUG)
