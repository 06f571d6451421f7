"""Imports go down the floors only (docs/architecture.md), checked for every package as importer.

ground:  schemas (event contracts) <- core (settings, metrics, model ports and adapters, sealing)
domain:  domain (each memory system's pure rules)
runtime: runtime + infra (shared plumbing, launchers) <- streams | projections | retrieval
api:     api
roof:    memory_agent (CLI, worker, replay, batch replay, MCP, demo)

A module may import its own package and any package on a lower floor; packages on the same
floor (streams, projections, retrieval) do not import each other. Every import counts, also
those inside functions or under TYPE_CHECKING: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FLOORS: dict[str, int] = {
    "schemas": 0,
    "core": 1,
    "domain": 2,
    "runtime": 3,
    "infra": 3,
    "streams": 4,
    "projections": 4,
    "retrieval": 4,
    "api": 5,
    "memory_agent": 6,
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> list[Path]:
    files: list[Path] = []
    for top in FLOORS:
        files.extend(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(files)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports (absolute names; relative imports resolved)."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from pkg import mod` imports the submodule pkg.mod when there is one.
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def wrong(module: str, target: str) -> bool:
    """May `module` import `target`? Only its own package or a lower floor."""
    mine, theirs = module.split(".")[0], target.split(".")[0]
    if theirs not in FLOORS or theirs == mine:
        return False
    return FLOORS[theirs] >= FLOORS[mine]


def violations() -> list[str]:
    return [f"{_module_name(path)} imports {target}"
            for path in _source_files() for target in sorted(imports_of(path))
            if wrong(_module_name(path), target)]


def test_every_package_is_on_a_floor() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {"tests", "bench"}
    assert packages == set(FLOORS)


def test_imports_go_down_the_floors() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("module", "target", "is_wrong"),
    [
        ("domain.facts.dedup", "streams.facts.agent", True),
        ("schemas.events", "memory_agent.cli_memory", True),
        ("core.llm.openai_provider", "api.app", True),
        ("core.settings", "domain.dates", True),
        ("projections.facts", "api.sections.topic", True),
        ("streams.app", "memory_agent.worker", True),
        ("retrieval.service", "memory_agent.replay", True),
        ("retrieval.service", "projections.queries", True),  # same floor: sideways
        ("streams.context", "projections.runner", True),
        ("api.app", "memory_agent.client", True),
        ("runtime.db", "streams.app", True),
        ("projections.facts", "domain.facts.dedup", False),
        ("api.app", "runtime.kafka_topics", False),
        ("memory_agent.worker", "api.app", False),
        ("streams.app", "core.settings", False),
        ("streams.context", "runtime.dead_letter", False),
        ("domain.lineage", "core.settings", False),
        ("memory_agent.cli", "memory_agent.worker", False),
    ],
)
def test_rule_tells_wrong_from_right(module: str, target: str, is_wrong: bool) -> None:
    assert wrong(module, target) is is_wrong


def test_relative_and_nested_imports_are_seen(tmp_path: Path) -> None:
    pkg = tmp_path / "domain" / "x"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    mod = pkg / "rules.py"
    mod.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n    from streams.facts import agent\n"
        "def f():\n    import api.app\n"
    )
    found = imports_of(mod, root=tmp_path)
    assert {"domain.x.sibling", "streams.facts.agent", "api.app"} <= found


def test_domain_imports_only_the_ground() -> None:
    # domain/ is pure rules: the standard library, numpy, the ground and itself; no I/O client.
    allowed = ("numpy", "schemas", "core", "domain")
    found = []
    for path in _source_files():
        module = _module_name(path)
        if module.split(".")[0] != "domain":
            continue
        for target in imports_of(path):
            top = target.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__" or top in allowed:
                continue
            found.append(f"{module} imports {target}")
    assert found == []


# A statement of SQL on one line, or a cursor call.
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b.*\b(FROM|INTO|SET)\b|\.execute(many)?\(")
DATABASE = ("psycopg", "psycopg_pool", "runtime.db", "projections")


def test_streams_hold_no_sql_and_no_database_client() -> None:
    """Stages read the read model through ports (domain/*/reads.py, domain/erasure_reads.py),
    implemented in projections/ and wired by the roof: no module under streams/ imports a
    database client or the pool's plumbing, or holds SQL (docs/backbone.md)."""
    found = []
    for path in sorted((ROOT / "streams").rglob("*.py")):
        module = _module_name(path)
        found += [f"{module} imports {target}" for target in sorted(imports_of(path))
                  if any(target == name or target.startswith(name + ".") for name in DATABASE)]
        found += [f"{module}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if SQL.search(line)]
    assert found == []


def test_the_sql_pattern_sees_statements_and_cursor_calls() -> None:
    assert SQL.search('    "SELECT seq FROM messages WHERE tenant_id = %s"')
    assert SQL.search("await conn.execute(_PENDING)") and SQL.search("cur.executemany(rows)")
    assert SQL.search("UPDATE erasure_rederive SET done_at = now()")
    assert not SQL.search("the messages projector applies a conversation's messages in log order")
