"""What the registry knows of one event type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class EventSpec:
    type: str
    version: int
    payload: type  # a schemas.events.Payload subclass
    requires_seq: bool = False
    # upcasters[v] turns version v into v + 1.
    upcasters: dict[int, Upcaster] = field(default_factory=dict)
