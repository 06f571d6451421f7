"""Versioned prompt files: loading, rendering, refusing unknown versions."""

from __future__ import annotations

import pytest

from core.llm import load_prompt


def test_summary_prompt_declares_its_variables_and_window_rule():
    prompt = load_prompt("summary-v1")
    assert prompt.version == "summary-v1"
    assert prompt.variables == {
        "previous_summary", "new_messages", "first_new_seq", "window_start", "window_end"
    }
    assert "drop anything from before seq {window_start}" in prompt.user_template
    assert len(prompt.sha256) == 64


def test_render_fills_placeholders_and_leaves_json_examples_and_values_alone():
    prompt = load_prompt("chunk-facts-v1")
    system, user = prompt.render({"messages": "[3] user: I said {window_start} and {\"a\": 1}"})
    assert system["role"] == "system" and user["role"] == "user"
    assert "[3] user: I said {window_start} and {\"a\": 1}" in user["content"]
    assert '{"summary": "...", "facts": [{"category": "...", "content": "..."}]}' in user["content"]
    assert "{messages}" not in user["content"]


def test_missing_variable_is_refused():
    with pytest.raises(ValueError, match="window_start"):
        load_prompt("summary-v1").render({"previous_summary": "", "new_messages": "",
                                          "first_new_seq": 0, "window_end": 3})


@pytest.mark.parametrize("version", ["summary-v999", "../settings", "summary", "Summary-v1"])
def test_unknown_or_unsafe_versions_are_refused(version):
    with pytest.raises(ValueError):
        load_prompt(version)
