"""Versioned prompt files (core/prompts/<version>.md), loaded and rendered by version."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping

_VERSION = re.compile(r"^[a-z0-9][a-z0-9-]*-v[0-9]+$")
_SECTION = re.compile(r"^## (system|user)\s*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class Prompt:
    """A system prompt and a user template; `{name}` placeholders are filled by render()."""

    version: str
    system: str
    user_template: str
    sha256: str

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER.findall(self.system + self.user_template))

    def render(self, variables: Mapping[str, object]) -> list[dict[str, str]]:
        """The chat messages for these variables; every placeholder must be given."""
        missing = self.variables - variables.keys()
        if missing:
            raise ValueError(f"prompt {self.version} needs {sorted(missing)}")
        return [
            {"role": "system", "content": _fill(self.system, variables)},
            {"role": "user", "content": _fill(self.user_template, variables)},
        ]


def _fill(template: str, variables: Mapping[str, object]) -> str:
    # Only known placeholders are replaced, so JSON examples in a prompt need no escaping
    # and braces inside the substituted text are never re-read as placeholders.
    return _PLACEHOLDER.sub(
        lambda m: str(variables[m.group(1)]) if m.group(1) in variables else m.group(0),
        template,
    )


@lru_cache(maxsize=32)
def load_prompt(version: str) -> Prompt:
    """Read core/prompts/<version>.md; raises ValueError for unknown versions."""
    if not _VERSION.match(version):
        raise ValueError(f"bad prompt version {version!r} (expected e.g. 'summary-v1')")
    path = resources.files("core").joinpath("prompts", f"{version}.md")
    if not path.is_file():
        raise ValueError(f"no prompt file for version {version!r}")
    text = path.read_text(encoding="utf-8")
    parts = _SECTION.split(text)
    # parts: [preamble, "system", body, "user", body]
    sections = dict(zip(parts[1::2], (body.strip() for body in parts[2::2])))
    if set(sections) != {"system", "user"} or not all(sections.values()):
        raise ValueError(f"prompt {version} needs one '## system' and one '## user' section")
    return Prompt(
        version=version,
        system=sections["system"],
        user_template=sections["user"],
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )


def format_messages(messages: list) -> str:
    """Render chat messages one per line as `[seq] role: content` for a prompt."""
    return "\n".join(f"[{m.seq}] {m.role}: {m.content}" for m in messages) or "(none)"
