"""The offline extractive summarizer: deterministic, bounded, incremental."""

from __future__ import annotations

import re

import pytest

from core.llm import ChatMessage
from domain.extractive import ExtractiveSummarizer

CONVERSATION = [
    ChatMessage(0, "user", "Hi! I adopted a cat named Miso last week. She is very shy."),
    ChatMessage(1, "assistant", "Congratulations! Shy cats need a quiet room and time."),
    ChatMessage(2, "user", "My WiFi router keeps dropping the connection every evening."),
    ChatMessage(3, "assistant", "Which router model is it? Check the firmware version first."),
    ChatMessage(4, "user", "It is a Netgear R7000 on firmware 1.0.11. Thanks."),
    ChatMessage(5, "assistant", "Update the R7000 firmware to 1.0.12 and move the WiFi channel to 6."),
    ChatMessage(6, "user", "Ok."),
    ChatMessage(7, "assistant", "The router channel change should stop the evening WiFi drops."),
]
LINE = re.compile(r"^\[(\d+)\] (user|assistant): ")


def seqs(summary: str) -> list[int]:
    return [int(m.group(1)) for line in summary.splitlines() if (m := LINE.match(line))]


async def test_output_is_labelled_as_not_an_llm():
    out = await ExtractiveSummarizer().summarize_window(None, CONVERSATION[:4], 0, 3)
    assert out.model == "extractive-v2"
    assert out.prompt_version == "extractive-v2"
    assert out.text


def test_same_input_gives_the_same_output():
    first = ExtractiveSummarizer().summarize(None, CONVERSATION, 0, 7)
    again = ExtractiveSummarizer().summarize(None, list(CONVERSATION), 0, 7)
    assert first == again


@pytest.mark.parametrize("budget", [80, 200, 600])
def test_summary_stays_within_budget(budget):
    long = [ChatMessage(i, "user" if i % 2 == 0 else "assistant",
                        f"Message {i} talks about router firmware and WiFi channels at length. " * 12)
            for i in range(14)]
    text = ExtractiveSummarizer(max_chars=budget).summarize(None, long, 0, 13)
    assert text
    assert len(text) <= budget


def test_lines_keep_conversation_order_and_speaker_roles():
    text = ExtractiveSummarizer().summarize(None, CONVERSATION, 0, 7)
    lines = text.splitlines()
    assert all(LINE.match(line) for line in lines)
    assert seqs(text) == sorted(seqs(text))
    assert "[0] user:" in text and "Miso" in text


def test_filler_is_not_chosen_when_the_budget_is_tight():
    text = ExtractiveSummarizer(max_chars=250).summarize(None, CONVERSATION, 0, 7)
    assert "[6] user: Ok." not in text
    assert "Thanks." not in text


def test_incremental_step_drops_what_slid_out_and_keeps_the_rest():
    summarizer = ExtractiveSummarizer()
    first = summarizer.summarize(None, CONVERSATION[:6], 0, 5)
    assert "Miso" in first  # seq 0 is in the first window
    second = summarizer.summarize(first, CONVERSATION[6:], 2, 7)
    assert "Miso" not in second and 0 not in seqs(second) and 1 not in seqs(second)
    assert min(seqs(second)) >= 2
    assert "R7000" in second  # in-window content of the previous summary survives
    assert "[7] assistant: The router channel change" in second  # the newest content is in


def test_previous_summary_alone_is_kept_when_nothing_is_new():
    first = ExtractiveSummarizer().summarize(None, CONVERSATION[2:6], 2, 5)
    assert ExtractiveSummarizer().summarize(first, [], 2, 5) == first


def test_untagged_previous_summary_from_an_llm_is_still_a_candidate():
    text = ExtractiveSummarizer().summarize(
        "The user owns a Netgear R7000 router with WiFi drops.", CONVERSATION[6:], 6, 7
    )
    assert text.splitlines()[0] == "The user owns a Netgear R7000 router with WiFi drops."
    assert "[7] assistant:" in text


def test_messages_outside_the_window_are_ignored():
    text = ExtractiveSummarizer().summarize(None, CONVERSATION, 4, 7)
    assert min(seqs(text)) >= 4


def test_empty_input_gives_empty_summary():
    summarizer = ExtractiveSummarizer()
    assert summarizer.summarize(None, [], 0, 0) == ""
    assert summarizer.summarize("", [ChatMessage(0, "user", "   ")], 0, 0) == ""
