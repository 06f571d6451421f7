"""`memory-agent search|store|list|show|forget|export` as a user runs them: child processes
talking to the real API, with a worker process projecting the log into PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sys

import orjson

from core.settings import ApiSettings
from tests.integration.conftest import (
    API_KEYS, free_port, running_api, settings_env, side_by_side, wait_until, worker_process,
)

KEYS = {**API_KEYS, "nox-key": {"tenant": "tenant-a", "user": "nox"}}
NETWORK = "Network configuration issue in the office: the mesh access point drops laptops when band steering is on."


async def cli(settings, url: str, *args: str, key: str = "key-a", user: str | None = "nox") -> tuple[int, str, str]:
    env = settings_env(settings) | {"MEMORY_CLIENT__URL": url, "MEMORY_CLIENT__API_KEY": key}
    env.pop("MEMORY_CLIENT__USER", None)
    if user is not None:
        env["MEMORY_CLIENT__USER"] = user
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "memory_agent.cli", *args, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode, out.decode(), err.decode()


async def test_the_memory_commands_against_the_real_stack(settings, tmp_path):
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=KEYS)})
    async with worker_process(settings, "--projectors-only", log_name="cli-worker"), running_api(settings) as url:
        code, out, err = await cli(settings, url, "store", NETWORK, "--category", "infrastructure", "--importance",
                                   "4", "--tag", "network")
        assert code == 0, err
        # "accepted": in the log, not projected within the API's wait (a worker still joining its group).
        assert out.startswith(("stored ", "accepted ")), out
        network_id = out.split()[1]

        async def projected() -> bool:
            code, out, _ = await cli(settings, url, "list", "--json")
            return code == 0 and network_id in {f["fact_id"] for f in json.loads(out)["facts"]}
        await wait_until(projected, 120, "the stored memory projected")
        code, out, _ = await cli(settings, url, "store", "Krz drinks oolong tea in the afternoon.", "--json",
                                 "--type", "preference")
        tea = json.loads(out)
        assert code == 0 and tea["projected"] and tea["outcome"] == "stored"

        # Read-only commands from here to `forget`, side by side (each is a process start).
        shared_start = next((a[:n] for n in range(8, 0, -1) for a in (network_id,)
                             if tea["fact_id"].startswith(a[:n])), None)
        out_file = tmp_path / "memory.jsonl"
        (search, search_json, listed_json, listed, shown, by_start, zzzz, no_user, exported, exported_json,
         shared) = await side_by_side(
            cli(settings, url, "search", "WiFi problem"),
            cli(settings, url, "search", "WiFi problem", "--json", "--kind", "fact"),
            cli(settings, url, "list", "--json"),
            cli(settings, url, "list"),
            cli(settings, url, "show", network_id),
            cli(settings, url, "show", network_id[:8], "--json"),
            cli(settings, url, "show", "zzzz"),
            cli(settings, url, "list", user=None),
            cli(settings, url, "export", "--out", str(out_file)),
            cli(settings, url, "export", "--json"),  # one JSON document of the same items
            cli(settings, url, "show", shared_start) if shared_start else asyncio.sleep(0))

        # Seed 001's check: "WiFi problem" finds the network-configuration memory (no shared word).
        code, out, err = search
        assert code == 0, err
        rows = out.splitlines()
        assert rows[0].split()[:3] == ["#", "score", "sim"] and network_id[:30] in rows[2]
        code, out, _ = search_json
        found = json.loads(out)
        assert code == 0 and found["items"][0]["id"] == network_id and found["items"][0]["content"] == NETWORK
        score = found["items"][0]["score"]
        assert score["final"] == score["similarity"] * score["importance_weight"] * score["recency_weight"]

        code, out, _ = listed_json
        assert code == 0 and {f["fact_id"] for f in json.loads(out)["facts"]} == {network_id, tea["fact_id"]}
        code, out, _ = listed
        assert code == 0 and "infrastructure" in out and "oolong" in out
        code, out, _ = shown
        assert code == 0 and NETWORK[:40] in out and "manual" in out
        # A unique start of the id will do; a start two ids share is refused, naming them.
        code, out, err = by_start
        assert code == 0 and json.loads(out)["fact_id"] == network_id, err
        if shared_start:
            code, _, err = shared
            assert code == 2 and network_id in err and tea["fact_id"] in err
        code, _, err = zzzz
        assert code == 1 and "not found" in err
        # Without an acting user a service key is told which flag or variable names one.
        code, _, err = no_user
        assert code == 2 and "--user" in err and "MEMORY_CLIENT__USER" in err, err

        code, _, err = exported
        lines = [orjson.loads(line) for line in out_file.read_bytes().splitlines()]
        assert code == 0 and "2 line(s)" in err
        assert {line["id"] for line in lines} == {network_id, tea["fact_id"]}
        assert all(line["event_id"] and line["valid_from"] for line in lines)
        code, out, err = exported_json
        assert code == 0, err
        assert sorted(json.loads(out), key=lambda i: i["id"]) == sorted(lines, key=lambda i: i["id"])

        code, out, _ = await cli(settings, url, "forget", network_id)
        assert code == 0 and out.startswith(f"forgot {network_id}")
        # After the forget; none of these changes anything (the two stores are refused), side by side.
        (searched, deleted, wrong_key, other_user, bound_key, importance, shared_store, since,
         unreachable) = await side_by_side(
            cli(settings, url, "search", "WiFi problem", "--json"),
            cli(settings, url, "show", network_id),  # deleted: gone for everyone
            cli(settings, url, "search", "x", key="wrong-key"),
            cli(settings, url, "search", "x", key="nox-key", user="maria"),
            cli(settings, url, "search", "tea", "--json", key="nox-key", user=None),
            cli(settings, url, "store", "x", "--importance", "9"),
            cli(settings, url, "store", "x", "--shared"),
            cli(settings, url, "search", "x", "--since", "not-a-date"),
            cli(settings, f"http://127.0.0.1:{free_port()}", "search", "x"))
        code, out, _ = searched
        assert network_id not in {item["id"] for item in json.loads(out)["items"]}

        # Exit codes mean something.
        code, _, err = deleted
        assert code == 1 and "not found" in err
        code, _, err = wrong_key
        assert code == 3 and "401" in err
        code, _, err = other_user
        assert code == 3 and "403" in err
        code, out, _ = bound_key
        assert code == 0 and json.loads(out)["user_id"] == "nox"
        code, _, err = importance
        assert code == 2 and "importance" in err
        code, _, err = shared_store
        assert code == 2 and "--subject" in err
        code, _, err = since
        assert code == 2 and "since" in err
    code, _, err = unreachable
    assert code == 4 and "unreachable" in err


async def test_every_option_has_help_text():
    import click

    from memory_agent.cli_memory import COMMANDS, EXIT_CODES

    for command in COMMANDS:
        assert command.help and (command.epilog == EXIT_CODES or command.name == "mcp")
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{command.name} {param.opts}"
