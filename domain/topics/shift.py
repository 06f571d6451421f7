"""Words with which a speaker announces a change of subject ("Different subject: ...", "Back to
the API ..."): the fold then does not favour the current topic (pure)."""

from __future__ import annotations

import re

# At the start of the message (after a "Name: " prefix, if any): an explicit change of subject,
# or a return to an earlier one. Either way the current topic gets no follow-up bonus; the
# seed's threshold alone decides whether the message joins an existing topic.
_CUES = re.compile(
    r"^\s*(?:[A-Z][\w.'\-]*(?: [A-Z][\w.'\-]*){0,2}:\s+)?(?:ok(?:ay)?[,.!]?\s+|so[,]?\s+|now[,]?\s+|anyway[,]?\s+)*"
    r"(?:(?:a\s+|on\s+a\s+|totally\s+|completely\s+)?(?:different|new|another|other|unrelated|separate)\s+"
    r"(?:subject|topic|question|thing|note|matter)\b"
    r"|something\s+(?:else|different|unrelated)\b"
    r"|(?:changing|change|switching|switch)\s+(?:the\s+)?(?:subject|topic|gears)\b"
    r"|on\s+another\s+note\b|unrelated(?:ly)?\b|off[\s-]topic\b|by\s+the\s+way\b|btw\b"
    r"|(?:going\s+|getting\s+|coming\s+)?back\s+to\b|returning\s+to\b)",
    re.IGNORECASE,
)


def announces_new_subject(text: str) -> bool:
    """True when the message opens by changing the subject or going back to an earlier one."""
    return _CUES.match(text) is not None
