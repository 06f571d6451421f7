"""Local single-node Apache Kafka 4.1 (KRaft) from Maven Central jars, under <state_dir>/kafka."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import shutil
import subprocess
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from infra.process import (
    InfraError,
    ServiceStatus,
    is_alive,
    port_in_use,
    read_pid,
    refuse_busy_port,
    tail,
    terminate,
)
from core.settings import Settings

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).with_name("kafka")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class KafkaConfig:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 19092
    controller_port: int = 19093
    heap: str = "512m"

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaConfig:
        """Broker address from MEMORY_KAFKA__BOOTSTRAP_SERVERS; the controller uses port + 1."""
        first = settings.kafka.bootstrap_servers.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        if not host or not port.isdigit():
            raise InfraError(f"kafka: cannot launch locally for bootstrap servers {first!r}")
        return cls(settings.state_dir.resolve(), host, int(port), int(port) + 1)

    @property
    def root(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def libs(self) -> Path:
        return self.root / "libs"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def server_properties(self) -> Path:
        return self.root / "config" / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.root / "log" / "server.log"

    @property
    def console_file(self) -> Path:
        """JVM stdout/stderr: crashes before log4j2 is up end here."""
        return self.root / "log" / "console.out"

    @property
    def pid_file(self) -> Path:
        return self.root / "kafka.pid"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def signature(self) -> tuple[str, ...]:
        """Command-line parts that identify our broker process (guards against pid reuse)."""
        return ("kafka.Kafka", str(self.server_properties))


def status(config: KafkaConfig) -> ServiceStatus:
    pid = read_pid(config.pid_file)
    running = pid is not None and is_alive(pid, config.signature())
    return ServiceStatus(
        "kafka", running, pid if running else None, _running_address(config), config.log_file
    )


def up(config: KafkaConfig, timeout: float = 120.0) -> ServiceStatus:
    """Start the broker unless it already runs; return once it answers a metadata request."""
    begin = time.monotonic()
    current = status(config)
    if current.running:
        if current.address != config.bootstrap:
            raise InfraError(
                f"kafka: already running from {config.root} on {current.address}, but "
                f"{config.bootstrap} is configured; run `memory-agent infra down` first"
            )
        wait_until_ready(config.bootstrap, timeout=15.0, log_file=config.log_file)
        return current
    hint = "set MEMORY_KAFKA__BOOTSTRAP_SERVERS to a free host:port (port+1 is the controller)"
    refuse_busy_port("kafka", config.host, config.port, hint)
    refuse_busy_port("kafka", config.host, config.controller_port, hint)
    java = _require("java")
    _fetch_libs(config)
    _render_config(config)
    _format_storage(config, java)
    proc = _spawn(config, java)
    try:
        wait_until_ready(config.bootstrap, timeout, config.log_file, pid=proc.pid)
    except InfraError:
        terminate(proc.pid, (), timeout=10.0)
        raise
    seconds = time.monotonic() - begin
    log.info("kafka: ready on %s after %.1fs (pid %d)", config.bootstrap, seconds, proc.pid)
    return ServiceStatus(
        "kafka", True, proc.pid, config.bootstrap, config.log_file, True, seconds
    )


def down(config: KafkaConfig, timeout: float = 30.0) -> ServiceStatus:
    """Stop the broker gracefully (SIGTERM: controlled shutdown), SIGKILL after `timeout`."""
    current = status(config)
    if current.running and current.pid is not None:
        log.info("kafka: stopping pid %d", current.pid)
        if terminate(current.pid, config.signature(), timeout):
            log.warning("kafka: did not stop within %.0fs; killed", timeout)
    config.pid_file.unlink(missing_ok=True)
    return status(config)


def wait_until_ready(
    bootstrap: str, timeout: float, log_file: Path | None = None, pid: int | None = None
) -> None:
    """Block until the broker answers a metadata request, or raise InfraError."""
    error = asyncio.run(_poll_metadata(bootstrap, timeout, pid))
    if error is not None:
        where = f"; see {log_file}:\n{tail(log_file)}" if log_file else ""
        raise InfraError(f"kafka: broker at {bootstrap} {error}{where}")


async def _poll_metadata(bootstrap: str, timeout: float, pid: int | None) -> str | None:
    deadline = time.monotonic() + timeout
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    last = f"did not open its port within {timeout:.0f}s"
    while time.monotonic() < deadline:
        if pid is not None and not is_alive(pid):
            return "exited during startup"
        if not port_in_use(host, int(port)):
            # Not listening yet: skip the client, whose connect errors would flood the log.
            await asyncio.sleep(0.2)
            continue
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        try:
            await asyncio.wait_for(admin.start(), 10.0)
            await asyncio.wait_for(admin.list_topics(), 10.0)
            return None
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last = f"did not answer a metadata request within {timeout:.0f}s ({exc!r})"
        finally:
            await admin.close()
        await asyncio.sleep(0.5)
    return last


def _running_address(config: KafkaConfig) -> str:
    """The address in the rendered config (what a running broker was started with)."""
    try:
        text = config.server_properties.read_text()
    except FileNotFoundError:
        return config.bootstrap
    match = re.search(r"^advertised\.listeners=PLAINTEXT://(\S+)$", text, re.MULTILINE)
    return match.group(1) if match else config.bootstrap


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise InfraError(f"kafka: `{tool}` not found on PATH (needs Java 17+ and Maven)")
    return path


_DOWNLOADED = re.compile(r"^\[?(?:INFO\]\s*)?Downloaded from \S+: \S+ \(([\d.,]+) (B|kB|KB|MB|GB)\b")
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def downloaded_bytes(line: str) -> float | None:
    """Size of the file a Maven `Downloaded from ...` transfer line reports, else None."""
    match = _DOWNLOADED.match(line.strip())
    if match is None:
        return None
    return float(match.group(1).replace(",", "")) * _UNITS[match.group(2)]


def _fetch_libs(config: KafkaConfig, report_every: float = 3.0) -> None:
    """Copy the broker jars from Maven Central (~/.m2 cache) once per pom version, logging
    progress (files and MB downloaded) every few seconds: the first run downloads ~50 MB."""
    pom = (TEMPLATES / "pom.xml").read_bytes()
    marker = config.libs / ".complete"
    digest = hashlib.sha256(pom).hexdigest()
    if marker.exists() and marker.read_text() == digest:
        return
    mvn = _require("mvn")
    log.info("kafka: fetching the broker jars with Maven into %s (first run only; downloads ~50 MB"
             " unless ~/.m2 has them)", config.libs)
    shutil.rmtree(config.libs, ignore_errors=True)
    config.root.mkdir(parents=True, exist_ok=True)
    (config.root / "pom.xml").write_bytes(pom)
    args = [mvn, "-B", "dependency:copy-dependencies", f"-DoutputDirectory={config.libs}", "-DincludeScope=runtime"]
    begin = last = time.monotonic()
    files, size, output = 0, 0.0, deque(maxlen=80)
    proc = subprocess.Popen(args, cwd=config.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line)
        got = downloaded_bytes(line)
        if got is not None:
            files, size = files + 1, size + got
        if time.monotonic() - last >= report_every:
            last = time.monotonic()
            log.info("kafka: Maven still running (%.0fs): %d file(s) downloaded so far, %.1f MB", last - begin, files, size / 1e6)
    if proc.wait() != 0:
        raise InfraError("kafka: Maven could not fetch the jars:\n" + "".join(output))
    jars = list(config.libs.glob("*.jar"))
    log.info("kafka: %d jars ready (%.1f MB; %d file(s) downloaded, the rest from ~/.m2) after %.1fs",
             len(jars), sum(j.stat().st_size for j in jars) / 1e6, files, time.monotonic() - begin)
    marker.write_text(digest)


def _render(template: str, values: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        return values[match.group(1)]

    return _PLACEHOLDER.sub(fill, template)


def _render_config(config: KafkaConfig) -> None:
    values = {
        "host": config.host,
        "port": str(config.port),
        "controller_port": str(config.controller_port),
        "data_dir": str(config.data),
        "log_file": str(config.log_file),
    }
    config.server_properties.parent.mkdir(parents=True, exist_ok=True)
    config.log_file.parent.mkdir(parents=True, exist_ok=True)
    for name in ("server.properties", "log4j2.properties"):
        text = _render((TEMPLATES / name).read_text(), values)
        (config.server_properties.parent / name).write_text(text)


def _format_storage(config: KafkaConfig, java: str) -> None:
    """Format the KRaft metadata log once (a fresh cluster id per state dir)."""
    if (config.data / "meta.properties").exists():
        return
    cluster_id = _random_cluster_id()
    args = [java, "-cp", f"{config.libs}/*", "kafka.tools.StorageTool", "format"]
    _run_java([*args, "-t", cluster_id, "-c", str(config.server_properties), "--ignore-formatted"])
    log.info("kafka: formatted %s (cluster id %s)", config.data, cluster_id)


def _random_cluster_id() -> str:
    """What `StorageTool random-uuid` prints (URL-safe base64 of a UUID), minus a JVM start."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):  # Kafka avoids ids that look like command-line flags
            return text


def _run_java(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise InfraError(f"kafka: {' '.join(args[-4:])} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _spawn(config: KafkaConfig, java: str) -> subprocess.Popen[bytes]:
    """Start the broker detached (own session: Ctrl-C in the caller's terminal spares it)."""
    log4j = config.server_properties.with_name("log4j2.properties")
    args = [
        java,
        f"-Xmx{config.heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={config.log_file.parent}",
        "-cp",
        f"{config.libs}/*",
        "kafka.Kafka",
        str(config.server_properties),
    ]
    with config.console_file.open("ab") as console:
        proc = subprocess.Popen(
            args,
            cwd=config.root,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    config.pid_file.write_text(f"{proc.pid}\n")
    log.info("kafka: started pid %d, waiting for %s", proc.pid, config.bootstrap)
    return proc
