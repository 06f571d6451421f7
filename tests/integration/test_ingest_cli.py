"""`memory-agent ingest` as a real process against the real stack: bad lines are reported with
their line numbers and not sent, good ones are appended once, a re-run appends nothing."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.integration.conftest import running_projectors, scalar, settings_env, wait_until

GOOD = [
    {"conversation_id": "c-ing", "user_id": "alice", "seq": 0, "role": "user", "content": "I live in Porto.",
     "occurred_at": "2026-01-01T00:00:00Z"},
    {"conversation_id": "c-ing", "user_id": "alice", "seq": 1, "role": "assistant", "content": "Nice city."},
    {"conversation_id": "c-ing", "user_id": "alice", "seq": 2, "role": "user", "content": "I work as a nurse.",
     "occurred_at": "2026-01-01T00:01:00+01:00", "metadata": {"client": "web"}},
    {"conversation_id": "c-ing-2", "tenant_id": "tenant-b", "user_id": "bob", "seq": 0, "role": "user",
     "content": "Hello from another tenant."},
]


def _lines() -> tuple[str, list[int], dict[int, str]]:
    """The file's text, the line numbers of the good lines, and the expected reason per bad line."""
    base = {"conversation_id": "c-ing", "user_id": "alice", "seq": 5, "role": "user", "content": "x"}
    rows: list[tuple[str, str | None]] = [
        (json.dumps(GOOD[0]), None),
        (json.dumps({k: v for k, v in base.items() if k != "content"}), "missing content"),
        (json.dumps(GOOD[1]), None),
        ("{not json", "not_json"),
        (json.dumps({k: v for k, v in base.items() if k != "seq"}), "missing seq"),
        (json.dumps({k: v for k, v in base.items() if k != "user_id"}), "missing user_id"),
        (json.dumps({k: v for k, v in base.items() if k != "role"}), "missing role"),
        ("", None),
        (json.dumps(GOOD[2]), None),
        (json.dumps(base | {"content": "a\u0000b"}), "invalid_text"),  # what a consumer could not store
        (json.dumps(base | {"occurred_at": "yesterday"}), "occurred_at"),
        (json.dumps(base | {"contnet": "typo"}), "unknown field(s) contnet"),
        (json.dumps(GOOD[3]), None),
        (json.dumps(GOOD[0] | {"content": "I live in Lisbon."}), "seq_conflict: seq 0 of tenant-a/c-ing"),
        ("[1, 2]", "not_an_object"),
        (json.dumps(base | {"seq": "six"}), "seq"),
    ]
    good = [i for i, (text, reason) in enumerate(rows, 1) if text and reason is None]
    bad = {i: reason for i, (_, reason) in enumerate(rows, 1) if reason is not None}
    return "\n".join(text for text, _ in rows) + "\n", good, bad


async def _ingest(settings, path: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", "ingest", str(path), "--tenant", "tenant-a",
        env=settings_env(settings), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    return process.returncode, out.decode(), err.decode()


def _reported(err: str) -> dict[int, str]:
    found = {}
    for line in err.splitlines():
        if line.startswith("  line "):
            number, _, reason = line[len("  line "):].partition(": ")
            found[int(number)] = reason
    return found


async def test_ingest_reports_bad_lines_and_appends_good_ones_once(settings, tmp_path: Path) -> None:
    text, good, bad = _lines()
    path = tmp_path / "mixed.jsonl"
    path.write_text(text)
    async with running_projectors(settings):
        code, out, err = await _ingest(settings, path)
        assert code == 1, out + err
        assert f"{len(good) + len(bad)} line(s): appended {len(good)} new, 0 already stored" in out, out + err
        reported = _reported(err)
        assert set(reported) == set(bad), err
        for number, reason in bad.items():
            assert reason in reported[number], (number, reported[number])

        async def projected() -> bool:
            return await scalar(settings, "SELECT count(*) FROM messages") == len(GOOD)
        await wait_until(projected, 120, "the good lines projected")
        stored = await scalar(settings, "SELECT string_agg(content, '|' ORDER BY tenant_id, conversation_id, seq)"
                                        " FROM messages")
        assert stored.split("|") == [GOOD[0]["content"], GOOD[1]["content"], GOOD[2]["content"], GOOD[3]["content"]]
        when = await scalar(settings, "SELECT occurred_at FROM messages WHERE conversation_id = 'c-ing' AND seq = 0")
        assert when.isoformat() == "2026-01-01T00:00:00+00:00"

        # The same file again: nothing new is sent, the good lines are counted as duplicates.
        code, out, err = await _ingest(settings, path)
        assert code == 1 and f"appended 0 new, {len(good)} already stored (not sent)" in out, out + err
        assert set(_reported(err)) == set(bad)
        # Only valid lines, all known: exit 0.
        only_good = tmp_path / "good.jsonl"
        only_good.write_text("\n".join(json.dumps(g) for g in GOOD[:2]) + "\n")
        code, out, err = await _ingest(settings, only_good)
        assert code == 0 and "appended 0 new, 2 already stored" in out, out + err

    assert await scalar(settings, "SELECT count(*) FROM messages") == len(GOOD)
    conflicts = await scalar(settings, "SELECT count(*) FROM projection_anomalies WHERE kind = 'seq_conflict'")
    assert conflicts == 0
    resent = await scalar(settings, "SELECT count(*) FROM projection_anomalies WHERE kind = 'duplicate'")
    assert resent == 0  # the re-runs sent nothing at all
