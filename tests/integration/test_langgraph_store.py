"""memory_agent.langgraph_store with the real LangGraph library on the real stack: the API over
HTTP, Kafka, PostgreSQL and a worker process projecting what the store writes."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from core.settings import ApiSettings
from tests.integration.conftest import API_KEYS, running_api, wait_until, worker_process

pytestmark = pytest.mark.skipif(importlib.util.find_spec("langgraph") is None,
                                reason="langgraph is not installed (pip install -e '.[langgraph]'; make setup does)")
NETWORK = "Network configuration issue in the office: the mesh access point drops laptops when band steering is on."
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_memory_app.py"


async def test_langgraph_store_and_graph_over_the_memory_service(settings):
    from memory_agent.langgraph_store import MemoryAgentStore  # noqa: PLC0415

    settings = settings.model_copy(update={"api": ApiSettings(api_keys=API_KEYS)})
    async with worker_process(settings, "--projectors-only", log_name="langgraph-worker"), running_api(settings) as api:
        store = MemoryAgentStore(api, "key-a")
        nox = ("nox",)
        await store.aput(nox, "wifi", {"content": NETWORK, "category": "infrastructure", "importance": 4})

        async def stored() -> bool:
            return await store.aget(nox, "wifi") is not None
        await wait_until(stored, 120, "the memory projected")
        item = await store.aget(nox, "wifi")
        assert item.key == "wifi" and item.namespace == nox
        assert item.value["content"] == NETWORK and item.value["category"] == "infrastructure"
        assert item.value["importance"] == 4 and item.value["tags"] == []

        # The service's search by meaning: "WiFi problem" shares no word with the memory.
        [hit, *_] = await store.asearch(nox, query="WiFi problem")
        assert hit.key == "wifi" and hit.score > 0
        assert [i.key for i in await store.asearch(nox)] == ["wifi"]  # no query: the user's memories
        assert await store.asearch(nox, filter={"category": "preference"}) == []
        # Another user of the tenant finds nothing of nox's; the sync API works from a thread.
        assert await asyncio.to_thread(store.search, ("maria",), query="WiFi problem") == []
        assert await store.alist_namespaces(prefix=nox) == [nox]

        # In a LangGraph graph: a node reads the store through the runtime, as LangGraph passes it.
        sys.path.insert(0, str(EXAMPLE.parent))
        try:
            from langgraph_memory_app import build_graph  # noqa: PLC0415
        finally:
            sys.path.remove(str(EXAMPLE.parent))
        answer = await build_graph(store).ainvoke({"user_id": "nox", "message": "What was the WiFi problem?"})
        assert NETWORK in answer["answer"]

        # A put on the same key is a new version; None deletes it.
        await store.aput(nox, "wifi", {"content": NETWORK + " Band steering stays off."})

        async def edited() -> bool:
            found = await store.aget(nox, "wifi")
            return found is not None and found.value["content"].endswith("stays off.")
        await wait_until(edited, 120, "the new version")
        await store.adelete(nox, "wifi")

        async def deleted() -> bool:
            return await store.aget(nox, "wifi") is None
        await wait_until(deleted, 120, "the deletion")
        # The turn-start context as text for a system prompt (no conversation: a clear 404).
        with pytest.raises(Exception, match="404"):
            await store.turn_context("nox", "no-such-conversation")
