"""Process, port and status helpers shared by the local Kafka and PostgreSQL launchers."""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path


class InfraError(RuntimeError):
    """A local service could not be started, stopped or inspected; the message says why."""


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    address: str
    log_file: Path
    # True only when this call started the service (False: it was already running).
    started: bool = False
    seconds: float = 0.0


def is_alive(pid: int, cmdline_contains: tuple[str, ...] = ()) -> bool:
    """Whether `pid` is a live (non-zombie) process whose command line has all the parts."""
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    # The state letter follows the parenthesised command name, which may contain spaces.
    if stat.rsplit(")", 1)[-1].split()[0] in {"Z", "X"}:
        return False
    return all(part in cmdline for part in cmdline_contains)


def _reap(pid: int) -> None:
    """Collect `pid` if it is our own exited child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def port_in_use(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def refuse_busy_port(service: str, host: str, port: int, hint: str) -> None:
    """Fail clearly when a port we are about to bind is held by a process we do not manage."""
    if port_in_use(host, port):
        raise InfraError(
            f"{service}: port {host}:{port} is already in use by a process that was not "
            f"started from this state dir (see `ss -ltnp | grep :{port}`). Stop it, or {hint}."
        )


def terminate(pid: int, cmdline_contains: tuple[str, ...], timeout: float) -> bool:
    """SIGTERM, wait up to `timeout` seconds, then SIGKILL. Returns True if it had to kill."""
    if not is_alive(pid, cmdline_contains):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return False
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    for _ in range(50):
        if not is_alive(pid):
            break
        time.sleep(0.1)
    return True


def tail(path: Path, lines: int = 25, errors: int = 10) -> str:
    """The last lines of a log file, for error messages, after its first ERROR/FATAL lines (a
    broker that failed to start logs why, then a long shutdown that would push it out)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    all_lines = text.splitlines()
    last = all_lines[-lines:]
    first_errors = [line for line in all_lines[:-lines] if " ERROR " in line or " FATAL " in line
                    or line.startswith(("ERROR", "FATAL"))][:errors]
    if not first_errors:
        return "\n".join(last)
    return "\n".join(["(first errors)", *first_errors, "(last lines)", *last])
