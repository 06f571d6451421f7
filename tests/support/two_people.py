"""A dated two-person conversation ("Name: text", both human, one role=user, one role=assistant)."""

from __future__ import annotations

from datetime import datetime, timezone

from core.llm.port import ChatMessage

SESSION_1 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)  # a Monday
SESSION_2 = datetime(2023, 5, 25, 19, 30, tzinfo=timezone.utc)

LINES = (
    (SESSION_1, "user", "Caroline: Hey Mel! Good to see you! How have you been?"),
    (SESSION_1, "assistant", "Melanie: Hey Caroline! I'm swamped with the kids and work. What's up with you?"),
    (SESSION_1, "user", "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."),
    (SESSION_1, "assistant", "Melanie: Wow, that's cool, Caroline! What happened that was so awesome?"),
    (SESSION_1, "user", "Caroline: The transgender stories were so inspiring! I adopted a cat named Oscar last week."),
    (SESSION_1, "system", "Context window trimmed; 14 tokens dropped."),
    (SESSION_1, "assistant", "Melanie: Aww! I ran a charity race for mental health two weeks ago in Boston."),
    (SESSION_1, "assistant", "Melanie: I'm thinking of going camping with my family next month."),
    (SESSION_2, "user", "Caroline: I'm researching adoption agencies, I want to give kids a loving home."),
    (SESSION_2, "assistant", "Melanie: That's amazing! I painted a lake sunrise last Friday, my 3rd painting this year."),
    (SESSION_2, "user", "Caroline: I moved from Lisbon to Porto in March, the new flat is near the river."),
    (SESSION_2, "tool", '{"weather": "sunny", "city": "Porto"}'),
    (SESSION_2, "assistant", "Melanie: Sounds lovely! Thanks!"),
    (SESSION_2, "user", "Caroline: ok, bye!"),
)


def messages() -> list[ChatMessage]:
    return [ChatMessage(seq, role, content, at) for seq, (at, role, content) in enumerate(LINES)]
