"""Messages written as "Name: text" (several people in one conversation): who spoke, and what."""

from __future__ import annotations

import re

# A name of up to 40 characters (letters, digits, spaces, dots, apostrophes, hyphens) and ": ".
_SPEAKER = re.compile(r"^(\w[\w .'-]{0,39}): (.*)$", re.DOTALL)


def split_speaker(content: str) -> tuple[str | None, str]:
    """("Caroline", "I went ...") for "Caroline: I went ..."; (None, content) otherwise."""
    match = _SPEAKER.match(content)
    return (match.group(1), match.group(2)) if match else (None, content)
