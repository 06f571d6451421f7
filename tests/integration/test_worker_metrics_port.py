"""Two deployments' workers on one machine: the second does not share the first's metrics port,
and the dashboard's view shows a worker's metrics only when they are its own deployment's."""

from __future__ import annotations

import asyncio
import os
import re
import sys

from api.ui.worker_metrics import fetch
from core.metrics import deployment_id
from tests.integration.conftest import free_port

SERVE = ("import logging, sys, time; logging.basicConfig(level=logging.INFO)\n"
         "from core.settings import Settings\nfrom memory_agent.worker_metrics import serve_metrics\n"
         "print(serve_metrics(Settings()), flush=True); time.sleep(600)")


async def worker_metrics_process(port: int, prefix: str) -> tuple[asyncio.subprocess.Process, int, str]:
    """serve_metrics of a worker of the deployment `prefix`, in its own process: (process, port, log)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env |= {"MEMORY_KAFKA__TOPIC_PREFIX": prefix, "MEMORY_WORKER__METRICS_PORT": str(port)}
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVE, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    line = await asyncio.wait_for(process.stdout.readline(), 120)
    assert line.strip().isdigit(), (line, await process.stderr.read(2000))
    served = int(line)
    log = b""
    if served != port:  # the warning is written before the port is returned
        log = await asyncio.wait_for(process.stderr.readline(), 30)
    return process, served, log.decode()


async def test_a_taken_port_gives_a_free_one_and_the_view_refuses_another_deployment() -> None:
    port = free_port()
    other, other_port, _ = await worker_metrics_process(port, "someone-else")
    ours, our_port, log = await worker_metrics_process(port, "ours")
    try:
        assert other_port == port and our_port != port
        assert re.search(rf"port {port} is taken .*serving on http://127\.0\.0\.1:{our_port}/metrics", log), log
        assert "MEMORY_WORKER__METRICS_PORT" in log

        mine = deployment_id("127.0.0.1:19092", "ours")
        # What answers on the configured port is the other deployment's: not shown, and said why.
        answer = await fetch(f"http://127.0.0.1:{port}/metrics", mine)
        assert "metrics" not in answer and "another deployment" in answer["error"]
        assert "'someone-else'" in answer["error"]
        # Our own worker's metrics are shown.
        answer = await fetch(f"http://127.0.0.1:{our_port}/metrics", mine)
        assert "error" not in answer, answer
        [info] = [m for m in answer["metrics"] if m["name"] == "memory_deployment_info"]
        assert info["samples"][0]["labels"]["topic_prefix"] == "ours"
    finally:
        for process in (other, ours):
            process.kill()
            await process.wait()
