"""`memory-agent demo`: append a sample conversation and print its turn-start context."""

from __future__ import annotations

import asyncio
import json
from importlib import resources

import httpx

from memory_agent.client import MemoryClient
from memory_agent.settings import Settings


def sample_rounds() -> list[tuple[str, str]]:
    """(user, assistant) pairs of a small design conversation shipped with the package."""
    text = resources.files("memory_agent.data").joinpath("sample_conversation.json").read_text()
    return [(r["user"], r["assistant"]) for r in json.loads(text)]


async def run_demo(settings: Settings, api_url: str, conversation_id: str) -> None:
    api_key, tenant = next((key, grant.tenant) for key, grant in settings.api.grants().items())
    rounds = sample_rounds()
    async with MemoryClient(settings) as client:
        seq = 0
        for user_text, assistant_text in rounds:
            for role, content in (("user", user_text), ("assistant", assistant_text)):
                await client.append_message(
                    tenant_id=tenant, conversation_id=conversation_id, user_id="demo-user",
                    seq=seq, role=role, content=content, event_id=f"{conversation_id}-{seq}",
                )
                seq += 1
    last = seq - 1
    print(f"appended {seq} messages to {tenant}/{conversation_id}; waiting for the projection...")
    async with httpx.AsyncClient(base_url=api_url, headers={"X-API-Key": api_key}, timeout=10) as http:
        context = None
        for _ in range(150):
            response = await http.get(
                f"/v1/conversations/{conversation_id}/context", params={"min_seq": last, "wait_ms": 2000}
            )
            if response.status_code == 200:
                context = response.json()
                if context["watermark"]["complete"] and context["mode"] != "raw":
                    break
            await asyncio.sleep(0.2)
    if context is None:
        raise SystemExit(f"no context for {conversation_id} from {api_url} (is the worker running?)")
    print(render(context))


def render(context: dict) -> str:
    lines = [f"turn-start context for {context['conversation_id']} (mode: {context['mode']})"]
    summary = context.get("summary")
    if summary:
        lines.append(
            f"<memory id={summary['memory_id']} seq {summary['start_seq']}-{summary['end_seq']} "
            f"model={summary.get('model')}>\n{summary['text']}\n</memory>"
        )
    for m in context["messages"]:
        lines.append(f"[{m['seq']}] {m['role']}: {m['content']}")
    w = context["watermark"]
    lines.append(f"watermark: summary covers up to seq {w['summary_end_seq']}, messages verbatim up to {w['last_seq']}")
    return "\n".join(lines)
