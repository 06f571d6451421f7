"""The command line's help, version and log levels (click's CliRunner; no services needed)."""

from __future__ import annotations

import importlib.metadata
import logging

from click.testing import CliRunner

from memory_agent.cli import main
from memory_agent.cli_logging import COORDINATOR_LOGGER, TransientCoordinatorFilter, install_filters


def _run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_version() -> None:
    assert _run("--version").strip() == f"memory-agent {importlib.metadata.version('memory-agent')}"


def test_replay_start_help_names_the_option_not_an_argument() -> None:
    out = _run("replay", "start", "--help")
    assert "Usage: main replay start [OPTIONS]\n" in out
    assert "--generation NAME" in out and "into generation --generation NAME" in out


def test_ingest_help_describes_the_line_format() -> None:
    out = _run("ingest", "--help")
    for words in ('"conversation_id": "c-1"', "required: conversation_id, user_id, seq", "occurred_at (ISO 8601",
                  "full event envelope", "reported with their line number", "already stored"):
        assert words in out, words


def test_every_option_has_help() -> None:
    """`schemas export --out` had none; no option of any command may be left unexplained."""
    import click

    def commands(group: click.Group, prefix: tuple[str, ...] = ()):
        for name, command in group.commands.items():
            yield (*prefix, name), command
            if isinstance(command, click.Group):
                yield from commands(command, (*prefix, name))

    missing = [(" ".join(path), param.name) for path, command in commands(main) for param in command.params
               if isinstance(param, click.Option) and not param.help]
    assert missing == []
    assert "Directory to write the .json files into" in _run("schemas", "export", "--help")


def test_generations_list_help_explains_the_columns() -> None:
    out = _run("generations", "list", "--help")
    assert "--json" in out and "settings it was built with" in out


def _record(level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(COORDINATOR_LOGGER, level, __file__, 1, msg, args, None)


def test_retried_coordinator_errors_are_info_and_other_errors_keep_their_level() -> None:
    f = TransientCoordinatorFilter()
    startup = _record(logging.ERROR, "Group Coordinator Request failed: %s",
                      "[Error 15] GroupCoordinatorNotAvailableError: memory-agent")
    dead = _record(logging.WARNING, "Marking the coordinator dead (node %s)for group %s.", 1, "g")
    other = _record(logging.ERROR, "Group Coordinator Request failed: %s", "[Error 30] GroupAuthorizationFailedError")
    assert f.filter(startup) and f.filter(dead) and f.filter(other)
    assert (startup.levelno, startup.levelname) == (logging.INFO, "INFO")
    assert "GroupCoordinatorNotAvailableError" in startup.getMessage() and "retrying" in startup.getMessage()
    assert dead.levelno == logging.INFO and "node 1" in dead.getMessage()
    assert other.levelno == logging.ERROR


def test_filter_is_installed_once_on_the_coordinator_logger(caplog) -> None:
    install_filters()
    install_filters()
    logger = logging.getLogger(COORDINATOR_LOGGER)
    assert sum(isinstance(f, TransientCoordinatorFilter) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO, logger=COORDINATOR_LOGGER):
        logger.error("Group Coordinator Request failed: %s", "GroupCoordinatorNotAvailableError")
    assert [r.levelname for r in caplog.records] == ["INFO"]


def test_downgraded_record_formats_with_faust_s_own_formatter() -> None:
    """The worker logs through mode's ExtensionFormatter, which rewrites record.args."""
    import io

    from mode.utils.logging import ExtensionFormatter

    record = _record(logging.ERROR, "Group Coordinator Request failed: %s", "GroupCoordinatorNotAvailableError")
    assert TransientCoordinatorFilter().filter(record)
    text = ExtensionFormatter(stream=io.StringIO(), fmt="[%(levelname)s] %(message)s").format(record)
    assert text.startswith("[INFO] Group Coordinator Request failed: GroupCoordinatorNotAvailableError (transient")
