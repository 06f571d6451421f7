"""Imports go one way (house rules): ground <- streams/projections/retrieval <- api <- roof.

The ground floor (settings, schemas, domain rules, model ports) imports nothing above it; the
middle floor (agents, projectors, retrieval) never imports the API or the roof (CLI, worker,
replay orchestration, demo), the only place that wires everything. Every import counts, also
those inside functions or under TYPE_CHECKING: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GROUND = ("schemas", "domain", "memory_agent.settings", "memory_agent.llm", "memory_agent.embeddings")
MIDDLE = ("streams", "projections", "retrieval")
ROOF = (
    "memory_agent.cli",  # and every memory_agent.cli_* module
    "memory_agent.worker",
    "memory_agent.replay",
    "memory_agent.batch_replay",
    "memory_agent.demo",
)
ABOVE_GROUND = MIDDLE + ("api",) + ROOF
ABOVE_MIDDLE = ("api",) + ROOF

# (importing module, imported module) pairs that stay, each with its reason. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    for prefix in prefixes:
        if name == prefix or name.startswith(prefix + "."):
            return True
        if prefix == "memory_agent.cli" and name.startswith("memory_agent.cli_"):
            return True
    return False


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> list[Path]:
    files: list[Path] = []
    for top in ("schemas", "domain", "streams", "projections", "retrieval", "api", "memory_agent"):
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


def violations() -> list[str]:
    wrong: list[str] = []
    for path in _source_files():
        module = _module_name(path)
        if _under(module, GROUND):
            forbidden = ABOVE_GROUND
        elif _under(module, MIDDLE):
            forbidden = ABOVE_MIDDLE
        else:
            continue
        for target in sorted(imports_of(path)):
            if _under(target, forbidden) and (module, target) not in ALLOWED:
                wrong.append(f"{module} imports {target}")
    return wrong


def test_source_tree_is_found() -> None:
    names = {_module_name(p) for p in _source_files()}
    for expected in ("domain.facts.dedup", "domain.topics.archive", "streams.kafka_topics",
                     "projections.facts", "retrieval.service", "api.app", "memory_agent.worker"):
        assert expected in names


def test_imports_go_one_way() -> None:
    assert violations() == []


def test_allowed_exceptions_are_still_needed() -> None:
    # An exception whose import is gone must leave the list, so the list stays honest.
    for importer, imported in ALLOWED:
        path = ROOT / (importer.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / importer.replace(".", "/") / "__init__.py"
        assert imported in imports_of(path), f"{importer} no longer imports {imported}"


@pytest.mark.parametrize(
    ("module", "target", "wrong"),
    [
        ("domain.facts.dedup", "streams.facts.agent", True),
        ("schemas.events", "memory_agent.cli_memory", True),
        ("memory_agent.llm.openai", "api.app", True),
        ("projections.facts", "api.sections.topic", True),
        ("streams.app", "memory_agent.worker", True),
        ("retrieval.service", "memory_agent.replay", True),
        ("projections.facts", "domain.facts.dedup", False),
        ("api.app", "streams.kafka_topics", False),
        ("memory_agent.worker", "api.app", False),
        ("streams.app", "memory_agent.settings", False),
        ("streams.app", "memory_agent.client", False),
    ],
)
def test_rule_tells_wrong_from_right(module: str, target: str, wrong: bool) -> None:
    forbidden = ABOVE_GROUND if _under(module, GROUND) else ABOVE_MIDDLE if _under(module, MIDDLE) else ()
    assert _under(target, forbidden) is wrong


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
    # domain/ is pure rules: the standard library, numpy, schemas/, settings and itself, no I/O client.
    import sys

    allowed = ("numpy", "schemas", "memory_agent.settings", "domain")
    wrong = []
    for path in _source_files():
        module = _module_name(path)
        if not _under(module, ("domain",)):
            continue
        for target in imports_of(path):
            top = target.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__" or _under(target, allowed):
                continue
            wrong.append(f"{module} imports {target}")
    assert wrong == []
