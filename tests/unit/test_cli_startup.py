"""`memory-agent --help` imports no heavy module, and its lazy command table matches the commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from memory_agent.cli import LAZY_COMMANDS, main

REPO = Path(__file__).resolve().parents[2]
# Each costs 0.1-1.5 s to import on the 2-core machine (python -X importtime); none is needed to list commands.
HEAVY = ("asyncio", "pydantic", "pydantic_settings", "httpx", "psycopg", "openai", "faust", "aiokafka", "numpy",
         "fastapi", "mcp", "core", "api", "projections", "streams", "runtime", "domain")


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys; sys.argv = ['memory-agent', '--help']\nfrom memory_agent.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "Commands:" in done.stdout and "export" in done.stdout and "mcp" in done.stdout
    assert done.stderr.strip() == "[]", done.stderr


@pytest.mark.parametrize("name", sorted(LAZY_COMMANDS))
def test_the_lazy_table_lists_each_command_with_its_own_help(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    assert LAZY_COMMANDS[name][1] == command.get_short_help_str(limit=10_000)
