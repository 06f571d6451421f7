"""`memory-agent mcp` driven by the official MCP SDK client over both transports (stdio and
streamable HTTP), against the real API, Kafka, PostgreSQL and a worker process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator

import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from core.settings import ApiSettings
from tests.integration.conftest import API_KEYS, free_port, running_api, settings_env, wait_until, worker_process

KEYS = {**API_KEYS, "nox-key": {"tenant": "tenant-a", "user": "nox"}}
TOOLS = {"search_memory", "store_memory", "list_memories", "forget_memory", "get_turn_context"}
NETWORK = "Network configuration issue in the office: the mesh access point drops laptops when band steering is on."


def env(settings, url: str, **client) -> dict[str, str]:
    values = settings_env(settings) | {"MEMORY_CLIENT__URL": url}
    values.update({f"MEMORY_CLIENT__{k.upper()}": v for k, v in client.items()})
    return values


@contextlib.asynccontextmanager
async def mcp_http(settings, url: str) -> AsyncIterator[str]:
    """`memory-agent mcp --http` as a child process; yields its /mcp URL once it answers."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", "mcp", "--http", "--port", str(port), env=env(settings, url),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}/mcp"

    async def up() -> bool:
        try:
            async with httpx.AsyncClient() as http:
                return (await http.post(endpoint, json={})).status_code == 401
        except httpx.HTTPError:
            return False

    try:
        await wait_until(up, 120, "the MCP HTTP server")
        yield endpoint
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 20)


async def exercise(client: Client, api: str, conversation: str) -> None:
    """The five tools as an agent uses them; the acting user is nox whatever the arguments say."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        properties = tool.input_schema["properties"]
        assert not {"user_id", "tenant_id", "user", "tenant"} & set(properties), tool.name
        assert tool.output_schema and tool.description
        # Written for the agent that reads them: no references to our design documents.
        texts = json.dumps([tool.description, tool.input_schema, tool.output_schema])
        assert "seed" not in texts.lower(), (tool.name, texts)
    assert tools["search_memory"].input_schema["properties"]["k"]["maximum"] == 50

    stored = await client.call_tool("store_memory", {"content": NETWORK, "category": "infrastructure",
                                                     "importance": 4, "tags": ["network"]})
    assert not stored.is_error, stored.content
    memory_id = stored.structured_content["memory_id"]
    # "accepted": in the log, not projected within the API's wait (a worker still joining its group).
    assert stored.structured_content["outcome"] in ("stored", "accepted")

    async def listed_once() -> bool:
        memories = (await client.call_tool("list_memories", {})).structured_content["memories"]
        return memory_id in {m["memory_id"] for m in memories}
    await wait_until(listed_once, 120, "the stored memory projected")
    again = await client.call_tool("store_memory", {"content": NETWORK})
    assert again.structured_content == {**again.structured_content, "memory_id": memory_id, "outcome": "merged"}

    found = await client.call_tool("search_memory", {"query": "WiFi problem", "kinds": ["fact"]})
    assert found.structured_content["user_id"] == "nox"
    async with httpx.AsyncClient(base_url=api, headers={"X-API-Key": "key-a", "X-User-Id": "nox"}) as http:
        searched = await http.get("/v1/search", params={"q": "WiFi problem", "kinds": "fact", "k": 10})
    api_items = searched.json()["items"]
    api_similarity = {item["id"]: item["score"]["similarity"] for item in api_items}
    for item in found.structured_content["items"]:  # meaning and keywords apart, not a "similarity" of 1.3
        assert -1 <= item["score"]["cosine"] <= 1 and 0 <= item["score"]["keyword_score"] <= 1
        # ... and the deprecated alias beside them, with its old meaning: the API's weighted sum.
        assert item["score"]["similarity"] == api_similarity[item["id"]]
    score_schema = tools["search_memory"].output_schema["$defs"]["Score"]["properties"]
    assert "Deprecated" in score_schema["similarity"]["description"]
    assert found.structured_content["items"][0]["id"] == memory_id  # seed 001's check, through MCP
    forged = await client.call_tool("search_memory", {"query": "WiFi problem", "user_id": "maria"})
    assert not forged.is_error and forged.structured_content["user_id"] == "nox"  # the argument is dropped
    bad = await client.call_tool("search_memory", {"query": "x", "k": 500})
    assert bad.is_error

    listed_result = await client.call_tool("list_memories", {})
    listed = listed_result.structured_content
    assert listed["user_id"] == "nox" and [m["memory_id"] for m in listed["memories"]] == [memory_id]
    # Compact: no null or empty fields but those the first version always had, one line of JSON as
    # the text an agent reads; the renamed fields beside their deprecated aliases (mine, updated_at).
    [memory] = listed["memories"]
    assert set(memory) == {"memory_id", "content", "category", "memory_type", "importance", "tags", "visibility",
                           "updated", "subject_id", "mine", "updated_at"} and len(memory["updated"]) == 10
    assert memory["mine"] is True and "shared_by" not in memory and memory["subject_id"] is None
    assert memory["updated_at"].startswith(memory["updated"]) and memory["tags"] == ["network"]
    assert listed_result.content[0].text == json.dumps(listed, ensure_ascii=False, separators=(",", ":"))

    async with httpx.AsyncClient(base_url=api, headers={"X-API-Key": "key-a"}) as http:
        for seq, text in enumerate(["My laptop keeps losing the office WiFi.", "Is band steering on?"]):
            answer = await http.post(f"/v1/conversations/{conversation}/messages", json={
                "user_id": "nox", "seq": seq, "role": "user" if seq % 2 == 0 else "assistant", "content": text})
            assert answer.status_code == 202

    async def projected() -> bool:
        result = await client.call_tool("get_turn_context", {"conversation_id": conversation})
        return not result.is_error and result.structured_content["last_seq"] == 1

    await wait_until(projected, 120, "the conversation")
    turn = (await client.call_tool("get_turn_context", {"conversation_id": conversation,
                                                        "query": "the WiFi problem again"})).structured_content
    assert [m["seq"] for m in turn["messages"]] == [0, 1] and turn["mode"] == "raw"
    assert NETWORK[:40] in turn["memories"]
    missing = await client.call_tool("get_turn_context", {"conversation_id": "nope"})
    assert missing.is_error and "404" in missing.content[0].text

    forgotten = (await client.call_tool("forget_memory", {"memory_id": memory_id})).structured_content
    assert forgotten["memory_id"] == memory_id and forgotten["applied"]
    after = (await client.call_tool("search_memory", {"query": "WiFi problem"})).structured_content
    assert memory_id not in {item["id"] for item in after["items"]}
    assert (await client.call_tool("forget_memory", {"memory_id": memory_id})).is_error  # gone


async def test_mcp_over_stdio_and_streamable_http(settings):
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=KEYS)})
    async with worker_process(settings, "--projectors-only", log_name="mcp-worker"), running_api(settings) as api:
        # stdio: the key (a service key) and the user come from the configuration.
        stdio = StdioServerParameters(command=sys.executable, args=["-m", "memory_agent.cli", "mcp"],
                                      env=env(settings, api, api_key="key-a", user="nox"))
        async with Client(stdio, read_timeout_seconds=120) as client:
            await exercise(client, api, "c-stdio")
        # A service key without a user: refused at start, naming the flag and the variable.
        alone = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memory_agent.cli", "mcp", env=env(settings, api, api_key="key-a"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(alone.communicate(), 120)
        assert alone.returncode == 2 and out == b"", (alone.returncode, err)
        assert b"--user" in err and b"MEMORY_CLIENT__USER" in err, err

        async with mcp_http(settings, api) as endpoint:
            # HTTP: every request brings its key; without one (or a wrong one) nothing is served.
            async with httpx.AsyncClient() as http:
                assert (await http.post(endpoint, json={}, headers={"X-API-Key": "wrong"})).status_code == 401
            # A key bound to nox: the user comes from the key, no header needed.
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer nox-key"}, timeout=120) as http:
                async with Client(streamable_http_client(endpoint, http_client=http), read_timeout_seconds=120) \
                        as client:
                    await exercise(client, api, "c-http")
            # A bound key cannot be talked into another user by a header either.
            async with httpx2.AsyncClient(headers={"X-API-Key": "nox-key", "X-User-Id": "maria"}, timeout=120) as h:
                async with Client(streamable_http_client(endpoint, http_client=h), read_timeout_seconds=120) as c:
                    refused = await c.call_tool("search_memory", {"query": "WiFi"})
                    assert refused.is_error and "403" in refused.content[0].text
