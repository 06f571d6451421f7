"""`memory-agent api --workers 2`: two processes share the port and both serve requests."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import free_port, settings_env, wait_until

pytestmark = pytest.mark.asyncio


def _children(pid: int) -> list[int]:
    """The serving processes uvicorn spawned (not multiprocessing's resource tracker)."""
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except OSError:  # gone meanwhile
            continue
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _accepted(port: int) -> set[str]:
    """Inodes of established TCP connections whose local end is `port` (accepted by the API)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
            found.add(fields[9])
    return found


async def test_two_workers_share_the_port_and_both_serve(settings) -> None:
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="api-workers-", suffix=".log", delete=False)
    env = settings_env(settings)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_agent.cli", "api", "--workers", "2", "--port", str(port),
        env=env, stdout=log, stderr=asyncio.subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        async def serving() -> bool:
            try:
                async with httpx.AsyncClient() as http:
                    return (await http.get(f"{url}/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(serving, 180, "the API to answer")
        await wait_until(lambda: _async(len(_children(process.pid)) == 2), 120, "two worker processes")
        workers = _children(process.pid)
        served_by: set[int] = set()

        async def both_hold_a_connection() -> bool:
            # Eight fresh keep-alive clients at once; the kernel hands each accepted connection
            # to one worker. Read which worker holds which while they are open.
            clients = [httpx.AsyncClient(base_url=url) for _ in range(8)]
            try:
                answers = await asyncio.gather(*(c.get("/healthz") for c in clients))
                assert all(a.status_code == 200 for a in answers)
                accepted = _accepted(port)
                for worker in workers:
                    if _socket_inodes(worker) & accepted:
                        served_by.add(worker)
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))
            return served_by == set(workers)

        await wait_until(both_hold_a_connection, 120, "both workers to serve a connection")
        assert process.returncode is None
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()
        log.close()
    assert len(served_by) == 2, Path(log.name).read_text()[-2000:]


async def _async(value: bool) -> bool:
    return value
