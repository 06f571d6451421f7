"""The Docker image's contents and the compose file, checked without a Docker engine.

The Dockerfile copies the build context (the repository minus .dockerignore) and runs
`pip install .`. These tests build the same wheel from the same context and import the
API and the CLI from the wheel alone, so a package missing from it fails here, not in a
container; and they ask Docker Compose itself whether docker-compose.yml is valid.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NOT_SHIPPED = {"tests", "bench"}  # packages that stay out of the image on purpose


def _ignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def _ignored(rel: str, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or (p.startswith("**/") and fnmatch.fnmatch(name, p[3:]))
               for p in patterns)


def _build_context(dest: Path) -> Path:
    """The repository as `docker build .` sends it (.dockerignore applied)."""
    patterns = _ignore_patterns()

    def ignore(directory: str, names: list[str]) -> set[str]:
        base = os.path.relpath(directory, REPO)
        return {n for n in names if _ignored(n if base == "." else f"{base}/{n}", patterns)}

    context = dest / "context"
    shutil.copytree(REPO, context, ignore=ignore, symlinks=True)
    return context


def repo_packages() -> set[str]:
    return {p.parent.name for p in REPO.glob("*/__init__.py")} - NOT_SHIPPED


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    context = _build_context(tmp)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
         "-q", "-w", str(tmp / "dist"), str(context)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (tmp / "dist").glob("memory_agent-*.whl")
    return built


def test_dockerignore_keeps_out_state_and_keeps_in_sources() -> None:
    patterns = _ignore_patterns()
    for heavy in (".venv", ".state", ".git", "memory_agent/__pycache__", ".pytest_cache", "x.egg-info"):
        assert _ignored(heavy, patterns), heavy
    for needed in (*sorted(repo_packages()), "pyproject.toml", "README.md"):
        assert not _ignored(needed, patterns), needed


def test_wheel_holds_every_package_and_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/", 1)[0] for n in names if "/" in n and ".dist-info" not in n}
    assert repo_packages() <= top_level, f"missing from the wheel: {repo_packages() - top_level}"
    assert not top_level & NOT_SHIPPED
    for data in ("projections/migrations/0001_messages.sql", "memory_agent/data/sample_conversation.json",
                 "infra/kafka/pom.xml", "api/ui/static/index.html", "api/ui/static/app.js", "api/ui/static/app.css"):
        assert data in names, data
    assert any(n.startswith("core/prompts/") and n.endswith(".md") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "memory-agent = memory_agent.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_api_and_cli_import_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    """Like the image: the wheel's files plus the installed dependencies, no source tree.
    `-S` skips .pth files, so the development venv's editable install cannot help."""
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    paths = [str(unpacked), *site.getsitepackages()]
    code = (f"import sys; sys.path[:0] = {paths!r}; import api.app, memory_agent.cli, memory_agent.worker;"
            " print(api.app.__file__); print(memory_agent.cli.__file__)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(line.startswith(str(unpacked)) for line in done.stdout.split()), done.stdout


def _compose() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_compose_file_is_valid_for_docker_compose(tmp_path: Path) -> None:
    compose = _compose()
    if compose is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed"
                    " (Debian: apt-get install docker-compose; `make test` does it as root)")
    done = subprocess.run([*compose, "-f", str(REPO / "docker-compose.yml"), "config"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    resolved = yaml.safe_load(done.stdout)
    assert set(resolved["services"]) == {"kafka", "postgres", "migrate", "worker", "api", "prometheus", "grafana",
                                         "jaeger"}
    assert resolved["services"]["grafana"]["profiles"] == ["production", "observability"]
    assert resolved["services"]["jaeger"]["profiles"] == ["observability"]  # traces: docs/observability.md
    for name in ("migrate", "worker", "api"):
        assert resolved["services"][name]["build"]["context"] == str(REPO)
        assert resolved["services"][name]["environment"]["MEMORY_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
    init = [v for v in resolved["services"]["postgres"]["volumes"] if "initdb" in str(v)]
    assert init, "the pgvector init script must be mounted"


def test_production_profile_takes_the_example_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--env-file .env.example --profile production`: every app container runs in production mode
    with the example's hashed keys and OpenAI-compatible models, and those settings are accepted."""
    compose = _compose()
    if compose is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed"
                    " (Debian: apt-get install docker-compose; `make test` does it as root)")
    done = subprocess.run([*compose, "-f", str(REPO / "docker-compose.yml"), "--env-file", str(REPO / ".env.example"),
                           "--profile", "production", "config"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    for name in ("migrate", "worker", "api"):
        env = {k: v for k, v in services[name]["environment"].items() if v is not None}
        assert env["MEMORY_ENVIRONMENT"] == "production"
        assert env["MEMORY_LLM__PROVIDER"] == "openai" and env["MEMORY_EMBEDDING__PROVIDER"] == "openai"
        assert env["MEMORY_POSTGRES__DSN"] == "postgresql://postgres:CHANGE-ME@postgres:5432/memory_agent"
        settings = _settings_from(env, monkeypatch)
        assert settings.environment == "production" and settings.api.tenants() == {"acme"}
    assert services["worker"]["environment"]["MEMORY_WORKER__METRICS_HOST"] == "0.0.0.0"
    grafana_mounts = " ".join(str(v) for v in services["grafana"]["volumes"])
    assert "deploy/grafana/provisioning" in grafana_mounts and "deploy/grafana/dashboards" in grafana_mounts


def _settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    """The settings a container with this environment builds (production validation included)."""
    from core.settings import Settings  # noqa: PLC0415

    with monkeypatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("MEMORY_")]:
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        return Settings()
