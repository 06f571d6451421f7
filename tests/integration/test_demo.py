"""`memory-agent demo` against a real worker process and the real API: every system shows up."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

from memory_agent.demo import DEMO_USER, run_demo, sample_messages
from tests.integration.conftest import running_api, scalar, settings_env, worker_process


async def test_demo_shows_every_memory_system(settings) -> None:
    """Bounded by run_demo's own deadline (it polls; a stuck system fails with what is missing)."""
    printed: list[str] = []
    async with worker_process(settings, log_name="demo-worker") as worker, running_api(settings) as url:
        complete = await run_demo(settings, url, "demo-c", timeout=600, say=printed.append)
        assert worker.returncode is None, open(worker.log_path).read()[-3000:]
        # `memory-agent demo` as a process, again: it appends nothing (the messages are
        # recognised) and finds every system ready; exit status 0.
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memory_agent.cli", "demo", "--api-url", url, "--conversation", "demo-c",
            "--timeout", "120", env=settings_env(settings), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        again = (await asyncio.wait_for(process.communicate(), 300))[0].decode()
        assert process.returncode == 0, again
    out = "\n".join(printed)
    assert complete, out
    total = len(sample_messages(datetime.now(UTC)))
    assert f"{total} messages in 4 sessions" in out and f"appended {total}, 0 already" in out
    assert f"appended 0, {total} already in the log" in again
    # A second run asks at the same turn again: a retried turn gets the same memories, scored.
    def retrieved_lines(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines() if line.strip().startswith(("message:", "fact:", "chunk:"))]

    assert retrieved_lines(again) and retrieved_lines(again) == retrieved_lines(out) and "x recency" in again

    report = printed[-1]
    sections = report.split("\n== ")
    summary, facts, topics, context = (s for s in sections if s.strip())
    assert summary.startswith("Summary chain") and " completed " in summary and "newest summary" in summary
    assert facts.startswith("Chunks and facts") and "chunk seq 0-19" in facts and "- [" in facts
    assert topics.startswith("Topics") and "*" in topics
    assert context.startswith("Turn-start context") and "retrieved: 0 of" not in context
    assert "final " in context and "x importance" in context and "x recency" in context
    assert "active topic: none" not in context

    # What the report shows is what the read model holds.
    completed = await scalar(settings, "SELECT count(*) FROM memory WHERE conversation_id = 'demo-c'"
                                       " AND status = 'completed'")
    assert completed >= 2
    facts_stored = await scalar(settings, "SELECT count(*) FROM facts WHERE owner_user_id = %s", (DEMO_USER,))
    assert facts_stored >= 1
    # Topic quality is another helper's; loosely: the subjects group messages together.
    topics_stored = await scalar(settings, "SELECT count(*) FROM topics WHERE conversation_id = 'demo-c'")
    assert 1 <= topics_stored < total
