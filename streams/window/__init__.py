"""Sliding-window summary memory (seeds 000, 002): the pure fold and the turn-start read."""

from streams.window.context import MemoryRow, Message, Summary, TurnContext, assemble_context
from domain.window.fold import (
    Command,
    GiveUp,
    InFlight,
    MessageSaved,
    Observed,
    RequestSummary,
    SummaryDone,
    SummaryGaveUp,
    Tick,
    WindowConfig,
    WindowState,
    calculate_summary_range,
    decide,
    evolve,
    observe,
    step,
)

__all__ = [
    "Command", "GiveUp", "InFlight", "MemoryRow", "Message", "MessageSaved", "Observed",
    "RequestSummary", "Summary", "SummaryDone", "SummaryGaveUp", "Tick", "TurnContext",
    "WindowConfig", "WindowState", "assemble_context", "calculate_summary_range", "decide",
    "evolve", "observe", "step",
]
