"""A click group whose subcommands are imported when run, so `memory-agent --help` imports nothing heavy.

Each lazy command is named with the module that defines it and its one-line help; `--help` lists
them from that table, and tests/unit/test_cli_startup.py checks the table against the commands.
"""

from __future__ import annotations

import importlib

import click
from click.utils import make_default_short_help


class LazyGroup(click.Group):
    def __init__(self, *args, lazy: dict[str, tuple[str, str]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # name -> ("module:attribute", one-line help)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            self.add_command(load(self.lazy[cmd_name][0]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Like click's, with the lazy commands' help taken from the table (nothing imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.lazy and name not in self.commands:
                rows.append((name, make_default_short_help(self.lazy[name][1], limit)))
            else:
                command = self.commands[name]
                if not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def load(target: str) -> click.Command:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
