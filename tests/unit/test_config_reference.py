"""docs/configuration.md is the settings model's own reference: fresh, complete, and right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_agent.config_descriptions import DESCRIPTIONS
from memory_agent.config_reference import render, sections, undescribed
from core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "python -m memory_agent.config_reference > docs/configuration.md"


def test_the_page_is_not_stale() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == render(Settings), f"docs/configuration.md is stale: run `{REGENERATE}`"


def test_every_setting_says_what_it_does() -> None:
    missing = undescribed(Settings)
    assert not missing, (f"write a comment above these settings (or add them to memory_agent/config_descriptions.py),"
                         f" then `{REGENERATE}`: {missing}")


def test_no_description_for_a_setting_that_is_gone() -> None:
    variables = {row.variable for section in sections(Settings) for row in section.rows}
    assert set(DESCRIPTIONS) <= variables, set(DESCRIPTIONS) - variables


def test_every_setting_of_the_model_is_on_the_page() -> None:
    variables = [row.variable for section in sections(Settings) for row in section.rows]
    count = sum(len(info.annotation.model_fields) if _is_section(info.annotation) else 1
                for info in Settings.model_fields.values())
    assert len(variables) == len(set(variables)) == count
    assert "MEMORY_ENVIRONMENT" in variables and "MEMORY_WORKER__METRICS_PORT" in variables


def _is_section(annotation: object) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "model_fields")


def test_the_documented_variables_and_defaults_configure_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each documented variable, set to its documented default, is read into the setting it names."""
    for name in [n for n in __import__("os").environ if n.startswith("MEMORY_")]:
        monkeypatch.delenv(name)
    baseline = Settings().model_dump(mode="json")
    for section in sections(Settings):
        for row in section.rows:
            if row.default == "unset":
                continue
            monkeypatch.setenv(row.variable, row.default)
    configured = Settings().model_dump(mode="json")
    assert configured == baseline
    # A value other than the default reaches the field the variable names.
    monkeypatch.setenv("MEMORY_WORKER__LAG_INTERVAL_S", "3.5")
    monkeypatch.setenv("MEMORY_SYSTEMS", json.dumps(["window"]))
    changed = Settings()
    assert changed.worker.lag_interval_s == 3.5 and changed.systems == ("window",)
