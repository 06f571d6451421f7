"""`memory-agent generations list` as a real process: readable columns and --json."""

from __future__ import annotations

import asyncio
import json
import sys

from tests.integration.conftest import settings_env


async def _cli(settings, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", *args, env=settings_env(settings),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out.decode(), err.decode()


async def test_generations_list_text_and_json(settings) -> None:
    code, out, err = await _cli(settings, "generations", "list")
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith(f"* {settings.generation} ") and line.endswith("settings: defaults")
    assert "{}" not in line

    code, out, err = await _cli(settings, "generations", "list", "--json")
    assert code == 0, err
    (entry,) = json.loads(out)
    assert entry["name"] == settings.generation and entry["active"] is True and entry["settings"] == {}
    assert entry["created_at"] and entry["status"] == "active"


async def test_generations_list_without_a_reachable_database_says_so(settings) -> None:
    env_settings = settings.model_copy(update={"postgres": settings.postgres.model_copy(
        update={"dsn": "postgresql://postgres@127.0.0.1:1/nowhere"})})
    code, out, err = await _cli(env_settings, "generations", "list")
    assert code == 1 and "cannot reach PostgreSQL" in err and "Traceback" not in err
