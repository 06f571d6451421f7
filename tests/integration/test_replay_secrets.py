"""A secret given to `replay start --set` never reaches the registry, the CLI, the admin API or the log."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from memory_agent import replay as replays
from tests.integration.conftest import running_api, settings_env

SECRET = "sk-live-DO-NOT-STORE-7f3a"
WINDOW_ONLY = {"MEMORY_SYSTEMS": '["window"]'}


async def cli(settings, *args: str, env: dict | None = None) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", *args, env=settings_env(settings) | WINDOW_ONLY | (env or {}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out.decode()


async def registry_text(settings, name: str) -> str:
    async with await psycopg.AsyncConnection.connect(settings.postgres.dsn) as conn:
        cur = await conn.execute("SELECT config::text FROM public.memory_generations"
                                 " WHERE topic_prefix = %s AND name = %s", (settings.kafka.topic_prefix, name))
        return (await cur.fetchone())[0]


@pytest.mark.asyncio
async def test_replay_secrets_are_referenced_by_name_and_resume_takes_them_from_the_environment(settings):
    name = f"{settings.generation}_sec"
    state = settings.model_copy(update={"state_dir": Path(settings_env(settings)["MEMORY_STATE_DIR"])})
    try:
        code, out = await cli(settings, "replay", "start", "--generation", name, "--detach",
                              "--set", f"llm.api_key={SECRET}", "--set", "llm.summary_prompt_version=summary-v1")
        assert code == 0, out
        stored = await registry_text(settings, name)
        assert SECRET not in stored
        assert "MEMORY_LLM__API_KEY" in stored and "MEMORY_LLM__SUMMARY_PROMPT_VERSION" in stored

        code, listed = await cli(settings, "generations", "list")
        assert code == 0 and name in listed and SECRET not in listed

        # A row written before secrets were left out is redacted on every read.
        async with await psycopg.AsyncConnection.connect(settings.postgres.dsn, autocommit=True) as conn:
            await conn.execute(
                "UPDATE public.memory_generations SET config = jsonb_set(config, '{overrides,MEMORY_EMBEDDING__API_KEY}',"
                " to_jsonb(%s::text)) WHERE topic_prefix = %s AND name = %s", (SECRET, settings.kafka.topic_prefix, name))
        async with running_api(settings) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
            served = await http.get("/v1/admin/generations", headers={"X-Admin-Key": "dev-admin-key"})
        assert served.status_code == 200 and SECRET not in served.text
        ours = next(g for g in served.json() if g["name"] == name)
        assert ours["config"]["secret_overrides"] == ["MEMORY_EMBEDDING__API_KEY", "MEMORY_LLM__API_KEY"]
        code, listed = await cli(settings, "generations", "list")
        assert SECRET not in listed

        # Resume: refused with the names while the environment lacks them; then the worker gets them.
        assert (await cli(settings, "replay", "cancel", name))[0] == 0
        code, out = await cli(settings, "replay", "resume", name)
        assert code != 0 and "MEMORY_LLM__API_KEY" in out and SECRET not in out
        code, out = await cli(settings, "replay", "resume", name,
                              env={"MEMORY_LLM__API_KEY": SECRET, "MEMORY_EMBEDDING__API_KEY": SECRET})
        assert code == 0, out
        pid = int(replays.pid_file(state, name).read_text())
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"MEMORY_LLM__API_KEY={SECRET}".encode() in environ
        log = state.state_dir / "logs" / f"replay-{name}.log"
        assert SECRET not in log.read_text(errors="replace")
    finally:
        replays.stop_worker(state, name)
