"""`memory-agent worker --role agents|stages|projectors`: the three parts of a worker as separate
processes (docs/scaling.md, "Roles"). With only the agents and the projectors running, the folds
ask for summaries and nothing answers them, while the topic fold places every message (it is given
each message's vector before it, by the agents' own embedder: docs/backbone.md, "Inputs before the
fold"); a `--role stages` process started later answers the summaries, and the agents' process
never called the LLM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.client import MemoryClient
from tests.integration.conftest import scalar, wait_until, worker_process
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.timeout(420)

CONVERSATIONS = 3
PER_CONVERSATION = 14
TOTAL = CONVERSATIONS * PER_CONVERSATION
PLACED = ("SELECT (SELECT count(*) FROM topic_messages)"
          " + (SELECT coalesce(sum(message_count), 0) FROM topic_archives)")


async def say(client: MemoryClient) -> None:
    salt = client.settings.kafka.topic_prefix  # keeps the shared LLM and embedding caches from answering
    for seq in range(PER_CONVERSATION):
        for c in range(CONVERSATIONS):
            await client.append_message(
                tenant_id="tenant-a", conversation_id=f"c{c}", user_id="alice", seq=seq,
                role="user" if seq % 2 == 0 else "assistant",
                content=f"{salt} conversation {c} message {seq}: we plan the garden beds and the tomatoes")


def log_of(process) -> str:
    return Path(process.log_path).read_text(errors="replace")


@pytest.mark.asyncio
async def test_agents_stages_and_projectors_run_as_separate_processes(settings):
    with FakeOpenAI() as fake:
        env = fake.env(llm=True) | {"MEMORY_EMBEDDING__PROVIDER": "stub", "MEMORY_WINDOW__WINDOW_SIZE": "6",
                                    "MEMORY_WINDOW__SUMMARIZE_AFTER_SEQ": "3", "MEMORY_SYSTEMS": '["window","topics"]'}
        state = f"/tmp/memory-agent-test/{settings.generation}"
        async with worker_process(settings, "--role", "agents", log_name="role-agents",
                                  extra_env=env | {"MEMORY_STATE_DIR": f"{state}-agents"}) as agents, \
                worker_process(settings, "--role", "projectors", log_name="role-projectors",
                               extra_env=env | {"MEMORY_STATE_DIR": f"{state}-projectors"}) as projectors, \
                MemoryClient(settings) as client:
            await say(client)

            async def asked() -> bool:  # the folds' summary requests reached the memory projector
                return (await scalar(settings, "SELECT count(*) FROM messages") == TOTAL
                        and await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'processing'")
                        >= CONVERSATIONS)

            await wait_until(asked, 180, f"summary requests projected (logs {agents.log_path}, {projectors.log_path})")

            async def placed() -> bool:  # the topic fold embeds before it folds: no stage needed
                return await scalar(settings, PLACED) == TOTAL

            await wait_until(placed, 180, f"every message placed by the agents alone (log {agents.log_path})")
            # Nobody runs the stages yet: no summary, no LLM call.
            assert await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'completed'") == 0
            assert fake.chat_requests == []

            async with worker_process(settings, "--role", "stages", log_name="role-stages",
                                      extra_env=env | {"MEMORY_STATE_DIR": f"{state}-stages"}) as stages:

                async def answered() -> bool:
                    return (await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'processing'") == 0
                            and await scalar(settings, "SELECT count(*) FROM memory WHERE status = 'completed'")
                            >= CONVERSATIONS
                            and await scalar(settings, PLACED) == TOTAL)

                await wait_until(answered, 240, f"the stages process to answer (log {stages.log_path})")
                assert "Summarized messages" in log_of(stages)
                assert stages.returncode is None
            assert agents.returncode is None and projectors.returncode is None
            # The agents' process folded and asked; it never ran a stage.
            assert "Summarized messages" not in log_of(agents)
            assert "Summarized messages" not in log_of(projectors)
            assert fake.chat_requests, "the summaries came from the LLM, through the stages process"
