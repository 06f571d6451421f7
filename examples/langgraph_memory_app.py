"""A LangGraph app whose long-term memory is Memory Agent (memory_agent.langgraph_store).

    pip install 'memory-agent[langgraph]'
    make run                                   # in another terminal: the API on :8080, key dev-key
    .venv/bin/python examples/langgraph_memory_app.py demo-user "Remember: the office WiFi drops laptops when band steering is on."
    .venv/bin/python examples/langgraph_memory_app.py demo-user "What was the WiFi problem?"

A message starting with "Remember:" is stored; any other is answered with what the memory
finds (a real app would hand the found lines to its chat model in the system prompt).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from memory_agent.langgraph_store import MemoryAgentStore


class Turn(TypedDict, total=False):
    user_id: str
    message: str
    answer: str


async def remember_or_recall(state: Turn, runtime: Runtime) -> Turn:
    namespace = (state["user_id"],)
    message = state["message"]
    if message.lower().startswith("remember:"):
        text = message.split(":", 1)[1].strip()
        await runtime.store.aput(namespace, f"note-{abs(hash(text))}", {"content": text, "importance": 4})
        return {"answer": f"Stored: {text}"}
    found = await runtime.store.asearch(namespace, query=message, limit=3)
    lines = [f"- {item.value['content']} (score {item.score:.2f})" for item in found]
    return {"answer": "\n".join(lines) or "Nothing in memory about that."}


def build_graph(store: MemoryAgentStore):
    graph = StateGraph(Turn)
    graph.add_node("memory", remember_or_recall)
    graph.add_edge(START, "memory")
    graph.add_edge("memory", END)
    return graph.compile(store=store)


async def main() -> None:
    user, message = sys.argv[1], " ".join(sys.argv[2:])
    store = MemoryAgentStore(os.environ.get("MEMORY_CLIENT__URL", "http://127.0.0.1:8080"),
                             os.environ.get("MEMORY_CLIENT__API_KEY", "dev-key"))
    result = await build_graph(store).ainvoke({"user_id": user, "message": message})
    print(result["answer"])


if __name__ == "__main__":
    asyncio.run(main())
