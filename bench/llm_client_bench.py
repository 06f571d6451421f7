"""The OpenAI client's CPU per chat completion, in this process, against the fake OpenAI server
run in another process (so its CPU is not counted): `OpenAiLlm` as the stages call it, beside the
SDK's typed `chat.completions.create` on a default client (how OpenAiLlm sent a completion before,
httpx transport: docs/scaling.md,
"The LLM client's CPU and one consumer for the lingering projectors"), alternated in one run.

    python -m bench.llm_client_bench [--calls 300] [--rounds 3]

Also reported once: the CPU of the first call of a fresh process (importing `openai` and building
the client), which the worker now pays at its start (runtime/llm_factory.py `preload_llm_client`).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from bench.common import report
from core.llm import ChatMessage, OpenAiLlm
from core.llm.prompts import format_messages, load_prompt

SERVER = ("import time; from tests.support.fake_openai import FakeOpenAI; "
          "print(FakeOpenAI().start().base_url, flush=True); time.sleep(86400)")
MESSAGES = [ChatMessage(seq, "user" if seq % 2 == 0 else "assistant", f"message {seq}: the router drops WiFi at"
                        f" night, channel {seq % 11}, firmware 1.0.{seq}") for seq in range(6)]
PREVIOUS = "The user has a Netgear R7000 and lives in Lyon. " * 8


def first_call_cpu_s(base_url: str) -> float:
    """A fresh interpreter's first completion: the import and the client included."""
    code = ("import asyncio, time; from core.llm import OpenAiLlm, ChatMessage; t = time.process_time();"
            f" asyncio.run(OpenAiLlm(model='fake-llm', base_url='{base_url}').summarize_window(None,"
            " [ChatMessage(0, 'user', 'hi')], 0, 0)); print(time.process_time() - t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


async def cpu_ms_per_call(call, calls: int) -> float:
    await call()  # the connection and lazy imports out of the measure
    started = time.process_time()
    for _ in range(calls):
        await call()
    return 1000 * (time.process_time() - started) / calls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        llm = OpenAiLlm(model="fake-llm", base_url=base_url)
        rendered = load_prompt("summary-v1").render({
            "previous_summary": PREVIOUS, "new_messages": format_messages(MESSAGES), "first_new_seq": 0,
            "window_start": 0, "window_end": 5})

        async def now() -> None:
            await llm.summarize_window(PREVIOUS, MESSAGES, 0, 5)

        from openai import AsyncOpenAI

        before = AsyncOpenAI(base_url=base_url, api_key="not-needed", timeout=60.0, max_retries=0)

        async def typed_create() -> None:  # what complete_messages did before: the same request
            answer = await before.chat.completions.create(model="fake-llm", messages=rendered, temperature=0.0)
            assert answer.choices[0].message.content

        rounds = []
        for _ in range(args.rounds):
            rounds.append({"openai_llm": round(await cpu_ms_per_call(now, args.calls), 3),
                           "typed_create": round(await cpu_ms_per_call(typed_create, args.calls), 3)})
        await llm.aclose()
        await before.close()
        first = first_call_cpu_s(base_url)
    finally:
        server.kill()
    ratio = sum(r["openai_llm"] for r in rounds) / sum(r["typed_create"] for r in rounds)
    report("the OpenAI client's CPU per chat completion (ms, this process)", {
        "calls_per_round": args.calls, "rounds": rounds, "ratio_openai_llm_to_typed_create": round(ratio, 3),
        "first_call_of_a_process_cpu_s": round(first, 3)})


if __name__ == "__main__":
    asyncio.run(main())
