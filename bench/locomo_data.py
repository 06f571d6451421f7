"""The LoCoMo development set (`../shared/eval-data/locomo-dev.json`) as the context-quality
benchmark's conversations: pure reading, no I/O beyond the file (docs/evaluation.md).

The file is CC BY-NC and stays outside the repository: it is read at run time from the path
given (default: `$MEMORY_LOCOMO_DEV`, else `shared/eval-data/locomo-dev.json` in the nearest
folder above the repository that has it). Ingestion follows the set's README exactly: every message is `message.appended`,
`occurred_at` = its session's time plus one second per message of the session, content
`"Speaker: text"` (plus ` [image: caption]` when a photo was shared), `speaker_a` is
`role=user` and `speaker_b` `role=assistant`, every message's `user_id` is `speaker_a`'s
name in lower case, seqs from 0 in order. Categories 1-4 are scored (5, adversarial, is not).
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

try:
    from . import longconv
except ImportError:  # loaded by file path from bench/locomo.py
    import longconv

KIND_OF_CATEGORY = {1: "multi", 2: "temporal", 3: "inference", 4: "single"}
_SESSION_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})\s*$", re.I)
_MONTHS = {m.lower(): i for i, m in enumerate(("January", "February", "March", "April", "May", "June", "July",
                                                "August", "September", "October", "November", "December"), 1)}


def default_path() -> Path:
    env = os.environ.get("MEMORY_LOCOMO_DEV")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    for parent in repo.parents:  # ../shared beside the repository (a worktree sits one level deeper)
        candidate = parent / "shared" / "eval-data" / "locomo-dev.json"
        if candidate.exists():
            return candidate
    return repo.parent / "shared" / "eval-data" / "locomo-dev.json"


def session_time(text: str) -> datetime:
    """"1:56 pm on 8 May, 2023" -> 2023-05-08 13:56 UTC."""
    found = _SESSION_TIME.match(text)
    if not found:
        raise ValueError(f"unreadable session time {text!r}")
    hour, minute, half, day, month, year = found.groups()
    if not 1 <= int(hour) <= 12:
        raise ValueError(f"unreadable session time {text!r}")
    hour = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS[month.lower()], int(day), hour, int(minute), tzinfo=UTC)


def sessions(conversation: dict) -> list[tuple[int, datetime, list[dict]]]:
    """(number, time, turns) of every session with turns, in number order."""
    out = []
    for key, value in conversation.items():
        found = re.fullmatch(r"session_(\d+)", key)
        if found and isinstance(value, list) and value:
            number = int(found[1])
            out.append((number, session_time(conversation[f"session_{number}_date_time"]), value))
    return sorted(out, key=lambda s: s[0])


def message_text(turn: dict) -> str:
    text = turn["text"]
    caption = turn.get("blip_caption")
    return f"{text} [image: {caption}]" if turn.get("img_url") and caption else text


def evidence_ids(raw) -> list[str]:
    """Evidence dia_ids; a few entries hold several ("D8:6; D9:17") or stray spaces."""
    out = []
    for entry in raw or ():
        out += [part for part in re.split(r"[;,\s]+", str(entry)) if part]
    return out


def conversation(sample: dict) -> longconv.Conversation:
    conv = sample["conversation"]
    user, assistant = conv["speaker_a"], conv["speaker_b"]
    messages: list[longconv.Message] = []
    seq_of: dict[str, int] = {}
    for number, start, turns in sessions(conv):
        for i, turn in enumerate(turns):
            role = "user" if turn["speaker"] == user else "assistant"
            seq_of[turn.get("dia_id", "")] = len(messages)
            messages.append(longconv.Message(len(messages), turn["speaker"], role, message_text(turn),
                                             start + timedelta(seconds=i), number))
    questions = []
    for index, qa in enumerate(sample["qa"]):
        kind = KIND_OF_CATEGORY.get(qa.get("category"))
        if kind is None or "answer" not in qa:
            continue
        evidence = tuple(seq_of[d] for d in evidence_ids(qa.get("evidence")) if d in seq_of)
        questions.append(longconv.Question(f"{sample['sample_id']}-q{index}", kind, qa["question"],
                                           str(qa["answer"]), evidence))
    return longconv.Conversation(sample["sample_id"], user, assistant, messages, questions,
                                 user_id=user.lower())


def load(path: Path | None = None) -> list[longconv.Conversation]:
    return [conversation(sample) for sample in json.loads(Path(path or default_path()).read_text())]
