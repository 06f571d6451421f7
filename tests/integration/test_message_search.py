"""The log is memory: messages ingested through Kafka, indexed by the message-index projector,
and retrieved through the real API beside facts and chunks (docs/retrieval.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from runtime.client import MemoryClient
from tests.integration.conftest import running_api, running_projectors, scalar, wait_until

START = datetime(2023, 3, 1, 18, 0, tzinfo=UTC)
# Ten planted facts, each with the question that asks for it and a word its answer must hold.
PLANTED = [
    ("Caroline: I finally adopted a beagle puppy and named him Biscuit.", "What is the name of Caroline's dog?",
     "Biscuit"),
    ("Caroline: My sister Priya moved to Porto to work as a marine biologist.", "Where does Caroline's sister live?",
     "Porto"),
    ("Caroline: I have been learning the cello, my teacher is strict about scales.",
     "Which instrument is Caroline learning?", "cello"),
    ("Caroline: We booked a cabin near Lake Tahoe for the anniversary trip.", "Where is the anniversary trip?",
     "Tahoe"),
    ("Caroline: My favourite dish is my grandmother's mushroom risotto.", "What is Caroline's favourite food?",
     "risotto"),
    ("Caroline: I ran the Lisbon half marathon in under two hours!", "Which race did Caroline run?", "marathon"),
    ("Caroline: The new job at the observatory starts with night shifts.", "Where is Caroline's new job?",
     "observatory"),
    ("Caroline: I am allergic to peanuts, so I always carry an epinephrine pen.", "What is Caroline allergic to?",
     "peanuts"),
    ("Caroline: Our book club is reading a novel about a lighthouse keeper.", "What is the book club reading?",
     "lighthouse"),
    ("Caroline: I painted the kitchen a deep teal colour over the weekend.", "What colour is Caroline's kitchen?",
     "teal"),
]
FILLER = ["Melanie: How was your day?", "Caroline: Pretty quiet, mostly errands.", "Melanie: Same here, honestly.",
          "Caroline: Let's talk again soon."]


def session_time(seq: int) -> datetime:
    """Four messages per session, one session every 9 days, a minute between messages."""
    return START + timedelta(days=9 * (seq // 4), minutes=seq % 4)


def script() -> list[str]:
    """Planted facts spread through filler: seq 4k+1 holds fact k (k < 10), the rest is chat."""
    lines = []
    for session in range(14):
        lines += FILLER
        if session < len(PLANTED):
            lines[-3] = PLANTED[session][0]
    return lines


async def ingest(settings, conversation: str, lines: list[str], *, user: str = "caroline", tenant: str = "tenant-a",
                 subject: str | None = None, at=session_time) -> None:
    async with MemoryClient(settings) as client:
        for seq, content in enumerate(lines):
            await client.append_message(tenant_id=tenant, conversation_id=conversation, user_id=user, seq=seq,
                                        subject_id=subject, role="user" if content.startswith("Caroline") else
                                        "assistant", content=content, occurred_at=at(seq))


async def indexed(settings, n: int) -> None:
    async def ready() -> bool:
        return (await scalar(settings, "SELECT count(*) FROM message_embeddings") or 0) >= n \
            and (await scalar(settings, "SELECT count(*) FROM messages") or 0) >= n
    await wait_until(ready, 180, f"{n} messages projected and indexed")


async def summarised(settings, conversation: str, end_seq: int, tenant: str = "tenant-a") -> None:
    """A completed rolling summary up to end_seq, as the window system would write it: the
    verbatim gap of a context then starts after it."""
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public") as conn:
        await conn.execute(
            "INSERT INTO memory (tenant_id, conversation_id, memory_id, memory_text, start_sequence, end_sequence,"
            " status, prompt_version, model, request_event_id) VALUES (%s, %s, 1, 'They chatted.', 0, %s,"
            " 'completed', 'test', 'test', 'r1')", (tenant, conversation, end_seq))


async def context(base: str, conversation: str, key: str = "key-a", **params) -> dict:
    async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}, timeout=60) as http:
        response = await http.get(f"/v1/conversations/{conversation}/context", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def messages_in(retrieved: dict) -> list[tuple[str, int]]:
    found = [(i["conversation_id"], i["message_range"][0]) for i in retrieved["items"] if i["kind"] == "message"]
    found += [tuple(e["id"].rsplit(":", 1)) for e in retrieved["excluded"] if e["kind"] == "message"]
    return [(c, int(s)) for c, s in found]


@pytest.mark.asyncio
async def test_messages_are_found_by_meaning_dated_and_never_from_the_gap_or_the_turn(settings):
    lines = script()
    await ingest(settings, "c1", lines)
    async with running_projectors(settings):
        await indexed(settings, len(lines))
    await summarised(settings, "c1", 29)  # the gap of a context is then seq 30..before_seq-1
    async with running_api(settings) as base:
        body = await context(base, "c1", query="Does Caroline have a pet?", before_seq=50)
    gap = [m["seq"] for m in body["messages"]]
    assert gap == list(range(30, 50))
    retrieved = body["retrieved"]
    assert retrieved["error"] is None
    dog = next(i for i in retrieved["items"] if i["kind"] == "message" and "Biscuit" in i["content"])
    assert dog["message_range"] == [1, 2] and dog["role"] == "user"
    assert dog["line"] == "- [1 March 2023] Caroline: I finally adopted a beagle puppy and named him Biscuit."
    assert "vector" in dog["score"]["found_by"]  # "pet" is not in the message: found by meaning
    assert all(seq < 30 for conversation, seq in messages_in(retrieved) if conversation == "c1")
    # Recency is measured from the turn's event time (the newest message before seq 50,
    # 2023), not the wall clock (years later): the dog message is 108 days older than the turn.
    assert retrieved["turn_seq"] == 50
    assert datetime.fromisoformat(retrieved["turn_time"]) == session_time(49)
    age_days = (session_time(49) - session_time(1)).total_seconds() / 86400
    ramp = settings.retrieval  # 1.0 up to fresh_days, then linear down to stale_weight at stale_days
    expected = 1.0 if age_days <= ramp.fresh_days else max(ramp.stale_weight, 1.0 - (age_days - ramp.fresh_days) / (
        ramp.stale_days - ramp.fresh_days) * (1.0 - ramp.stale_weight))
    assert expected < 1.0
    assert dog["score"]["recency_weight"] == pytest.approx(expected)
    # Every line carries its date as people write it (day month-name year).
    for item in retrieved["items"]:
        shown = datetime.fromisoformat(item["occurred_start"])
        assert item["line"].startswith(f"- [{shown.day} {shown:%B} {shown.year}")


@pytest.mark.asyncio
async def test_ten_questions_in_one_conversation_each_get_their_memory(settings):
    """Asked one after another, each a new turn two messages later, every question's planted
    message is in front of the model: in this response, or in one of a turn still inside the
    surfaced window (14 messages), which is the only reason an item is skipped. Retrieval is
    never emptied; and asked at one position (a retry, or a benchmark's way of asking), each
    question gets its answer in its own response."""
    lines = script()
    await ingest(settings, "c1", lines)
    async with running_projectors(settings):
        await indexed(settings, len(lines))
    await summarised(settings, "c1", len(lines) - 1)
    window = settings.retrieval.surfaced_window_seqs
    shown: list[tuple[int, str]] = []  # (turn, retrieved text)
    async with running_api(settings) as base:
        for turn, (_, question, answer) in enumerate(PLANTED):
            seq = len(lines) + 2 * turn
            retrieved = (await context(base, "c1", query=question, before_seq=seq))["retrieved"]
            assert retrieved["items"], question
            shown.append((seq, retrieved["text"]))
            visible = [text for at, text in shown if seq - window <= at <= seq]
            assert any(answer in text for text in visible), (question, retrieved["text"])
        for _, question, answer in PLANTED:
            retrieved = (await context(base, "c1", query=question, before_seq=len(lines) + 40))["retrieved"]
            assert answer in retrieved["text"], question
            assert not [e for e in retrieved["excluded"] if e["reason"] == "already_surfaced"]


@pytest.mark.asyncio
async def test_other_conversations_of_the_user_but_never_another_users_or_tenants(settings):
    secret = "Caroline: The safe combination is hidden under the blue ceramic owl."
    await ingest(settings, "mine-1", FILLER + [secret])
    await ingest(settings, "mine-2", FILLER)
    await ingest(settings, "theirs", ["Caroline: The safe combination is in the red ceramic frog."], user="bob")
    await ingest(settings, "other-tenant", ["Caroline: The safe combination is taped behind the ceramic cat."],
                 tenant="tenant-b")
    await ingest(settings, "mine-other-subject", ["Caroline: The safe combination is in the ceramic dog."],
                 subject="work")
    async with running_projectors(settings):
        await indexed(settings, 2 * len(FILLER) + 4)
    async with running_api(settings) as base:
        retrieved = (await context(base, "mine-2", query="Where is the safe combination?"))["retrieved"]
    found = set(messages_in(retrieved))
    assert ("mine-1", len(FILLER)) in found
    assert "owl" in retrieved["text"]
    assert not {c for c, _ in found} & {"theirs", "other-tenant", "mine-other-subject"}
    for word in ("frog", "cat", "dog"):
        assert word not in retrieved["text"]


@pytest.mark.asyncio
async def test_all_too_common_words_answer_200_and_a_failing_section_degrades_to_its_error(settings):
    """When every query word is in most rows, no keyword search runs (the bare 0.0 literal
    used to arrive as Decimal: TypeError, a 500). And if retrieval fails outright, the context
    still answers, with the reason in the section's `error`."""
    lines = [f"{'Caroline' if i % 2 else 'Melanie'}: hello hello, the weather is weather {i}" for i in range(60)]
    await ingest(settings, "c1", lines)
    async with running_projectors(settings):
        await indexed(settings, len(lines))
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True) as conn:
        await conn.execute("ANALYZE messages")
    await summarised(settings, "c1", 49)
    async with running_api(settings) as base:
        body = await context(base, "c1", query="hello weather", before_seq=60)
        retrieved = body["retrieved"]
        assert retrieved["error"] is None and retrieved["query"].startswith("hello weather")
        assert retrieved["items"] and not any("keyword" in i["score"]["found_by"] for i in retrieved["items"])
        async with await psycopg.AsyncConnection.connect(
                settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True) as conn:
            # The table every search reads (memory_items, migration 0020).
            await conn.execute("ALTER TABLE memory_items RENAME TO memory_items_gone")
        broken = await context(base, "c1", query="hello weather", before_seq=60)
    assert broken["retrieved"]["items"] == [] and "memory_items" in broken["retrieved"]["error"]
    assert [m["seq"] for m in broken["messages"]] == list(range(50, 60))  # the rest still answers


@pytest.mark.asyncio
async def test_a_bigger_budget_is_filled_when_there_are_candidates(settings):
    lines = [f"Caroline: Day {i} of the zeppelin restoration: we {verb} the {part}."
             for i, (verb, part) in enumerate((v, p) for v in ("sanded", "painted", "measured", "rebuilt", "tested", "cleaned",
                                                                       "oiled", "photographed", "inspected", "braced",
                                                                       "welded", "catalogued")
                                              for p in ("gondola", "rudder", "envelope", "frame", "engine", "valves",
                                                        "rigging", "propeller", "ballast", "hangar door"))]
    await ingest(settings, "c1", lines)
    async with running_projectors(settings):
        await indexed(settings, len(lines))
    await summarised(settings, "c1", len(lines) - 1)
    async with running_api(settings) as base:
        small = (await context(base, "c1", query="How is the zeppelin restoration going?", budget_tokens=500))
        large = (await context(base, "c1", query="How is the zeppelin restoration going?", budget_tokens=2000,
                               before_seq=len(lines) + 40))
    assert small["retrieved"]["tokens_used"] > 0.9 * 500
    assert large["retrieved"]["tokens_used"] > 0.9 * 2000, large["retrieved"]["tokens_used"]
    assert large["retrieved"]["candidates"] > small["retrieved"]["candidates"]


@pytest.mark.asyncio
async def test_the_index_is_idempotent_and_skips_system_messages(settings):
    async with MemoryClient(settings) as client:
        for seq, role in enumerate(("user", "system", "assistant", "tool")):
            await client.append_message(tenant_id="tenant-a", conversation_id="c1", user_id="u", seq=seq, role=role,
                                        content=f"{role} message {seq}")
    async with running_projectors(settings):
        await indexed(settings, 2)
        await wait_until(lambda: _offset_at(settings, 4), 60, "the index past every record")
    assert await scalar(settings, "SELECT array_agg(seq ORDER BY seq) FROM message_embeddings") == [0, 2]
    async with await psycopg.AsyncConnection.connect(
            settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public", autocommit=True) as conn:
        await conn.execute("DELETE FROM projector_offsets WHERE projector = 'message_index'")
    async with running_projectors(settings):  # a restart from scratch writes nothing twice
        await wait_until(lambda: _offset_at(settings, 4), 60, "the index past every record again")
    assert await scalar(settings, "SELECT count(*) FROM message_embeddings") == 2


async def _offset_at(settings, n: int) -> bool:
    return (await scalar(settings, "SELECT sum(next_offset) FROM projector_offsets"
                                   " WHERE projector = 'message_index'") or 0) >= n


@pytest.mark.asyncio
async def test_a_retrieved_question_comes_with_its_answer_once_and_never_from_the_gap(settings):
    """A question found by meaning carries the reply that follows it (the answer is what the
    caller asks about again); the reply is not a second item; a reply inside the verbatim gap
    is not attached (the model sees it there)."""
    lines = FILLER * 2 + [
        "Melanie: Which database did your team pick for the bookshop orders?",
        "Caroline: Postgres, because the order history needs real transactions.",
    ] + FILLER + [
        "Melanie: Got any sketches from the lake trip to show? I'd love to see them.",
        "Caroline: Yes, a watercolour of the old boathouse at dawn.",
    ] + FILLER + [
        "Caroline: Oh, by the way, I met my new neighbour Anna yesterday!",
        "Melanie: How did you two get to know each other?",
        "Caroline: It happened at a pottery class.",
        FILLER[0],
        "Melanie: Read any good books lately?",
        "Caroline: I loved Sapiens, a history of humankind.",
        "Melanie: Nice! Any others?",
        "Caroline: Two weeks ago I finished Avalanche in one sitting.",
    ] + FILLER + [
        "Melanie: And which city did your sister Priya move to last spring?",
        "Caroline: Porto, she works at the aquarium there.",
    ]
    await ingest(settings, "c1", lines)
    async with running_projectors(settings):
        await indexed(settings, len(lines))
    last = len(lines) - 1
    await summarised(settings, "c1", last - 1)  # the gap is the last message: Priya's answer
    async with running_api(settings) as base:
        retrieved = (await context(base, "c1", query="Which database did the team pick for the bookshop orders?",
                                   before_seq=last + 1))["retrieved"]
        question = next(i for i in retrieved["items"] if i["kind"] == "message" and "database" in i["content"])
        assert question["message_range"] == [8, 9]
        # (the best message line goes on with Caroline's next turn in the session: see below)
        assert "→ Caroline: Postgres, because the order history needs real transactions. … " in question["line"]
        assert ("c1", 9) not in messages_in(retrieved)  # carried by the question, not an item of its own
        # A message that asks before it ends ("...to show? I'd love to see them.") carries its
        # reply too, and the pair is scored with the words of both: every searched word of this
        # query ("watercolour" only in the reply, "lake", "trip" only in the question) is covered.
        sketch = (await context(base, "c1", query="Which watercolour from the lake trip?",
                                before_seq=last + 1))["retrieved"]
        pair = next(i for i in sketch["items"] if i["kind"] == "message" and "lake trip" in i["content"])
        assert pair["message_range"] == [14, 15]
        assert pair["line"].endswith("→ Caroline: Yes, a watercolour of the old boathouse at dawn.")
        assert pair["score"]["keyword_score"] == pytest.approx(1.0)
        assert ("c1", 15) not in messages_in(sketch)
        # An answer that goes on in the speaker's next turn, after a short question of the other's:
        # the best message line shows it.
        books = (await context(base, "c1", query="Which books has Caroline been reading lately?",
                               before_seq=last + 1))["retrieved"]
        best = next(i for i in books["items"] if i["kind"] == "message")
        assert best["message_range"] == [24, 25]
        assert best["line"].endswith("Sapiens, a history of humankind. … Caroline: Two weeks ago I finished Avalanche in"
                                     " one sitting.")
        sister = (await context(base, "c1", query="Which city did Priya move to?", before_seq=last + 1))["retrieved"]
        asked = next(i for i in sister["items"] if i["kind"] == "message" and "Priya" in i["content"])
        assert "→" not in asked["line"] and "aquarium" not in sister["text"]
    # With the thread on (`thread_weight`, off by default: docs/evaluation.md), a question and
    # its reply whose subject is a message back are scored with that message's words too:
    # "neighbour" and "Anna" are in neither "How did you two get to know each other?" nor its reply.
    threaded = settings.model_copy(update={"retrieval": settings.retrieval.model_copy(update={"thread_weight": 0.5})})
    async with running_api(threaded) as base:
        anna = (await context(base, "c1", query="Where did Caroline meet her new neighbour Anna?",
                              before_seq=last + 1))["retrieved"]
        met = next(i for i in anna["items"] if i["kind"] == "message" and "pottery class" in i["line"])
        told = next(i for i in anna["items"] if i["kind"] == "message" and "Anna yesterday" in i["content"])
        assert met["score"]["keyword_score"] > 0.5 * told["score"]["keyword_score"] > 0
