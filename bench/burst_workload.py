"""Long dated two-person conversations as a burst of messages for the benches: from the generator
(`bench/longconv.py`, ~51 characters a message) or from the LoCoMo development set read at run time
(~128 characters a message; CC BY-NC, never copied into the repository: `MEMORY_BENCH_LOCOMO` or
`shared/eval-data/locomo-dev.json` beside the repository or above it).

    python -m bench.system_bench --models offline --workload locomo --messages 5882
    python -m bench.embeddings_speed --texts locomo --sentences 5882 --threads 1
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import longconv

WORKLOADS = ("generated", "longconv", "locomo")
_LOCOMO_TIME = re.compile(r"(\d+):(\d+) (am|pm) on (\d+) (\w+),? (\d{4})")


@dataclass(frozen=True)
class BurstMessage:
    conversation_id: str
    seq: int
    role: str
    content: str
    occurred_at: datetime


def locomo_path() -> Path:
    """`MEMORY_BENCH_LOCOMO`, else `shared/eval-data/locomo-dev.json` beside the repository or above it
    (a worktree in /work/wt/NAME finds /work/shared)."""
    if os.environ.get("MEMORY_BENCH_LOCOMO"):
        return Path(os.environ["MEMORY_BENCH_LOCOMO"])
    for parent in Path(__file__).resolve().parents[1].parents:
        if (found := parent / "shared" / "eval-data" / "locomo-dev.json").exists():
            return found
    raise FileNotFoundError("the LoCoMo development set: set MEMORY_BENCH_LOCOMO to locomo-dev.json")


def _locomo_time(text: str) -> datetime:
    hour, minute, half, day, month, year = _LOCOMO_TIME.search(text).groups()
    hour = int(hour) % 12 + (12 if half == "pm" else 0)
    return datetime(int(year), longconv.MONTHS.index(month) + 1, int(day), hour, int(minute), tzinfo=UTC)


def _locomo_conversations() -> list[list[tuple[str, str, datetime]]]:
    """Each conversation as (speaker role, "Speaker: text", time) in order; speaker_a is the user."""
    out = []
    for sample in json.loads(locomo_path().read_text()):
        conv = sample["conversation"]
        lines = []
        number = 1
        while f"session_{number}" in conv:
            started = _locomo_time(conv[f"session_{number}_date_time"])
            for i, turn in enumerate(conv[f"session_{number}"]):
                role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
                lines.append((role, f"{turn['speaker']}: {turn['text']}", started + timedelta(seconds=i)))
            number += 1
        out.append(lines)
    return out


def burst(workload: str, messages: int, salt: str = "") -> list[BurstMessage]:
    """`messages` messages of whole conversations (the last one cut), each conversation in order;
    the corpus is repeated under new conversation ids when it has fewer. `salt` ends every text
    (a run that must start with cold caches needs texts of its own)."""
    if workload == "longconv":
        source = ([(m.role, m.content, m.occurred_at) for m in c.messages] for c in _generated())
    elif workload == "locomo":
        source = _cycled(_locomo_conversations())
    else:
        raise ValueError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS[1:])}")
    out: list[BurstMessage] = []
    for number, lines in enumerate(source):
        for seq, (role, content, at) in enumerate(lines[: messages - len(out)]):
            out.append(BurstMessage(f"{workload}-{number}", seq, role, content + salt, at))
        if len(out) >= messages:
            return out
    return out


def _generated():
    seed = 1
    while True:
        yield from longconv.generate(seed, 10)
        seed += 1


def _cycled(conversations: list):
    while True:
        yield from conversations


async def produce_burst(client, rows: list[BurstMessage], tenant_id: str = "bench") -> None:
    """Every message of `rows` on the conversation topic, in order, acknowledged."""
    pending = []
    for m in rows:
        envelope = client.message_event(tenant_id=tenant_id, conversation_id=m.conversation_id,
                                        user_id=m.conversation_id, seq=m.seq, role=m.role, content=m.content,
                                        occurred_at=m.occurred_at)
        pending.append(await client.enqueue(envelope))
        if len(pending) >= 1000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
