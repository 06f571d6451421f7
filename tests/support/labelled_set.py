"""A small hand-labelled retrieval set: memories in several scopes and the queries they answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable, Literal, Sequence

A, B = "tenant-a", "tenant-b"
JOE, ROSA = "grandpa-joe", "aunt-rosa"


@dataclass(frozen=True)
class Memory:
    """A fact (facts table) or a chunk (conversation_chunks) with where it belongs."""

    id: str
    kind: Literal["fact", "chunk"]
    tenant: str
    user: str
    subject: str | None
    content: str
    category: str = "other"
    memory_type: str = "fact"
    importance: int = 3
    visibility: Literal["private", "shared"] = "private"
    age_days: float = 1.0
    deleted: bool = False
    superseded: bool = False
    conversation: str = "c-earlier"


@dataclass(frozen=True)
class Query:
    id: str
    tenant: str
    user: str
    subject: str | None
    text: str  # the current message
    relevant: tuple[str, ...]  # memory ids that answer it (all must be retrievable in scope)
    context: tuple[str, ...] = field(default=())  # earlier messages, oldest first


def _f(id, tenant, user, subject, content, category="other", **kw) -> Memory:
    return Memory(id, "fact", tenant, user, subject, content, category, **kw)


def _c(id, tenant, user, subject, content, conversation, **kw) -> Memory:
    return Memory(id, "chunk", tenant, user, subject, content, conversation=conversation, **kw)


MEMORIES: tuple[Memory, ...] = (
    # Seed 001: an assistant's own long-term memories (tenant-a, user nox, no subject).
    _f("n01", A, "nox", None, "Home network configuration: the UniFi Dream Machine hands out 192.168.8.0/24 "
       "and DNS goes through the Pi-hole at 192.168.8.2.", "infrastructure", memory_type="decision", importance=4,
       age_days=20),
    # Says "network configuration" and never "WiFi": only meaning can connect it to seed 001's query.
    _f("n02", A, "nox", None, "Network configuration issue in the office: the mesh access point drops laptops when "
       "band steering is on, so band steering stays off.", "infrastructure", age_days=45),
    _f("n03", A, "nox", None, "Krz prefers short, direct answers without bullet-point lists.", "preference",
       memory_type="preference", importance=5, age_days=120),
    _f("n04", A, "nox", None, "We chose PostgreSQL with pgvector over SQLite for the memory store because several "
       "services write to it at the same time.", "architecture", memory_type="decision", importance=4, age_days=10),
    _f("n05", A, "nox", None, "The Kafka cluster runs in KRaft mode; topics have eight partitions keyed by "
       "conversation id.", "architecture", age_days=12),
    _f("n06", A, "nox", None, "The nightly backup job to the Backblaze B2 bucket failed three nights in a row in "
       "March because its API key had expired.", "incident", memory_type="event", age_days=60),
    _f("n07", A, "nox", None, "Krz drinks oolong tea in the afternoon and dislikes coffee.", "preference",
       memory_type="preference", importance=2, age_days=200),
    _f("n08", A, "nox", None, "The 3090 GPU machine in the closet runs Ollama on port 11434 for local embeddings.",
       "infrastructure", age_days=30),
    _f("n09", A, "nox", None, "Summaries written by the small model lose names and numbers; extraction prompts must "
       "ask to keep them verbatim.", "lesson", memory_type="insight", importance=4, age_days=5),
    _f("n10", A, "nox", None, "Krz's sister Lena visits every December; she is vegetarian.", "family", age_days=80),
    _f("n11", A, "nox", None, "The Telegram bridge (CCC) forwards every message to the memory agent over HTTP on "
       "port 8080.", "infrastructure", age_days=15),
    _f("n12", A, "nox", None, "Deploys happen on Tuesdays only; Friday deploys were banned after the January "
       "outage.", "process", memory_type="decision", importance=4, age_days=90),
    _f("n13", A, "nox", None, "Home router: a Netgear R7000 on firmware 1.0.11.", "infrastructure",
       age_days=300, superseded=True),
    _f("n14", A, "nox", None, "Krz is learning Portuguese and practises with Duolingo every morning.", "hobby",
       importance=2, age_days=25),
    _f("n15", A, "nox", None, "Python asyncio tasks that nobody awaits swallow their exceptions; keep a reference "
       "and check the result.", "lesson", memory_type="insight", age_days=3),
    _f("n16", A, "nox", None, "The domain aispace.dev is renewed through Cloudflare and expires in October.",
       "admin", age_days=150),
    _c("nc1", A, "nox", None, "Krz and Nox debugged why the laptop lost its connection in the office: the 5 GHz "
       "band was crowded and moving the access point to channel 36 fixed it.", "c-nox-1", age_days=40),
    _c("nc2", A, "nox", None, "Nox set up Prometheus alerts for disk usage on the backup server; the alert fires "
       "at 85 percent full.", "c-nox-2", age_days=8),
    _c("nc3", A, "nox", None, "They planned the May holiday in Lisbon: flights are booked, a hotel near Alfama "
       "is still missing.", "c-nox-3", age_days=2),
    # Seed 003: a memorial about Grandpa Joe; Maria (granddaughter) and Tom (son) each have
    # private facts, and some are shared with every member.
    _f("g01", A, "maria", JOE, "Grandpa Joe spent every summer fishing for trout on Lake Tahoe.", "hobby",
       importance=4, visibility="shared", age_days=30),
    _f("g02", A, "maria", JOE, "Grandpa Joe taught Maria to ride a bike in the church parking lot.",
       "relationship", age_days=14),
    _f("g03", A, "maria", JOE, "He worked for 35 years as a machinist at the Boeing plant in Seattle.",
       "occupation", importance=4, visibility="shared", age_days=30),
    _f("g04", A, "maria", JOE, "Maria remembers him as stubborn but quick to laugh at his own mistakes.",
       "personality", age_days=6),
    _f("g05", A, "maria", JOE, "He always ordered black coffee and a slice of apple pie at Denny's.", "preference",
       importance=2, age_days=6),
    _f("g06", A, "tom", JOE, "Joe served in the Navy during the Korean War, from 1951 to 1953, on the USS "
       "Missouri.", "milestone", importance=5, visibility="shared", age_days=50),
    _f("g07", A, "tom", JOE, "Tom and his father did not speak for two years after an argument about Tom's "
       "divorce.", "relationship", importance=4, age_days=50),
    _f("g08", A, "tom", JOE, "Joe woke up at 5 a.m. every day and listened to the farm report on AM radio.",
       "habit", visibility="shared", age_days=50),
    _f("g09", A, "tom", JOE, "Joe restored a 1957 Chevy Bel Air in the garage over ten winters.", "hobby",
       age_days=50),
    _f("g10", A, "tom", JOE, "Joe kept his war medals in a cigar box under the bed.", "other", age_days=50),
    _f("g11", A, "maria", JOE, "Grandpa Joe was born in Ohio.", "milestone", age_days=6, deleted=True),
    _c("gc1", A, "maria", JOE, "Maria shared memories of fishing trips with Grandpa Joe at the lake; he taught her "
       "to tie flies and clean the catch.", "c-maria-1", age_days=20),
    _c("gc2", A, "tom", JOE, "Tom described his father's job at the aircraft factory and how proud he was of the "
       "747 program.", "c-tom-1", age_days=20),
    # Another subject of the same user, and another tenant: never in the scopes above.
    _f("r01", A, "maria", ROSA, "Aunt Rosa ran a bakery in Naples famous for its sfogliatelle.", "occupation",
       age_days=10),
    _f("r02", A, "maria", ROSA, "Aunt Rosa loved fishing off the pier in Sorrento every summer.", "hobby",
       visibility="shared", age_days=10),
    _f("b01", B, "nox", None, "Home network configuration: the WiFi is a TP-Link Deco mesh with the SSID "
       "'bluefin'.", "infrastructure", importance=5, age_days=1),
    _f("b02", B, "maria", JOE, "Grandpa Joe loved fishing for salmon in Alaska every summer.", "hobby",
       importance=5, visibility="shared", age_days=1),
)

QUERIES: tuple[Query, ...] = (
    # Seed 001's success check: "WiFi problem" finds the memory about network configuration.
    Query("q01", A, "nox", None, "WiFi problem", ("n01", "n02", "nc1")),
    Query("q02", A, "nox", None, "My laptop keeps losing its connection when I work in the office.", ("n02", "nc1")),
    Query("q03", A, "nox", None, "How should I format my replies to Krz?", ("n03",)),
    Query("q04", A, "nox", None, "Why did we pick Postgres instead of SQLite again?", ("n04",)),
    Query("q05", A, "nox", None, "How many partitions do the Kafka topics have?", ("n05",)),
    Query("q06", A, "nox", None, "Did the offsite backups work last month?", ("n06", "nc2")),
    Query("q07", A, "nox", None, "What should I offer Krz to drink this afternoon?", ("n07",)),
    Query("q08", A, "nox", None, "Where does the embedding model run locally?", ("n08",)),
    Query("q09", A, "nox", None, "The summaries keep dropping people's names, why is that?", ("n09",)),
    Query("q10", A, "nox", None, "I'm planning the menu for when Lena comes over.", ("n10",)),
    Query("q11", A, "nox", None, "Can we push the release out this Friday?", ("n12",)),
    Query("q12", A, "nox", None, "Which router do we have at home now?", ("n01",)),
    Query("q13", A, "nox", None, "My background coroutine failed and nothing was logged.", ("n15",)),
    Query("q14", A, "nox", None, "When does the domain name need renewing?", ("n16",)),
    Query("q15", A, "nox", None, "The backup box is running out of disk space.", ("nc2",)),
    Query("q16", A, "nox", None, "What is still left to book for the trip to Portugal?", ("nc3",)),
    Query("q17", A, "nox", None, "Which port was that again?", ("n11",),
          ("How does the Telegram bridge send you the messages?", "It posts each one to the memory agent.")),
    Query("q18", A, "nox", None, "How is it going so far?", ("n14",),
          ("Let's talk about my language learning.", "Sure, which language are you studying?",
           "Portuguese, for the trip.")),
    Query("q19", A, "maria", JOE, "What did Grandpa like to do in the summer?", ("g01", "gc1")),
    Query("q20", A, "maria", JOE, "Where did Grandpa Joe work?", ("g03",)),
    Query("q21", A, "maria", JOE, "Was he ever in the military?", ("g06",)),
    Query("q22", A, "maria", JOE, "What was his morning routine like?", ("g08",)),
    Query("q23", A, "tom", JOE, "Did Dad ever fix up old cars?", ("g09",)),
    Query("q24", A, "tom", JOE, "Why did my father and I stop talking back then?", ("g07",)),
    Query("q25", A, "tom", JOE, "Where did he keep his medals?", ("g10",)),
    Query("q26", A, "maria", JOE, "What was Grandpa Joe like as a person?", ("g04",)),
    Query("q27", A, "maria", JOE, "What did he usually eat when we went out to a diner?", ("g05",)),
    Query("q28", A, "maria", JOE, "Who taught me to ride a bike?", ("g02",)),
    Query("q29", A, "maria", ROSA, "What was Aunt Rosa's bakery known for?", ("r01",)),
)


def visible_to(memory: Memory, tenant: str, user: str, subject: str | None) -> bool:
    """The visibility rule retrieval must implement (own or shared-in-subject, current only)."""
    if memory.tenant != tenant or memory.deleted or memory.superseded:
        return False
    if memory.kind == "chunk":
        return memory.user == user and memory.subject == subject
    own = memory.user == user and memory.subject == subject
    return own or (subject is not None and memory.visibility == "shared" and memory.subject == subject)


def recall_at_k(ranked: dict[str, list[str]], k: int) -> float:
    """Mean over QUERIES of |relevant in the top k| / |relevant|; `ranked` maps query id -> ids."""
    total = 0.0
    for query in QUERIES:
        top = set(ranked.get(query.id, [])[:k])
        total += len(top & set(query.relevant)) / len(query.relevant)
    return total / len(QUERIES)


def validate() -> None:
    """Ids are unique and every relevant id is visible in its query's scope (a unit test calls this)."""
    ids = [m.id for m in MEMORIES]
    assert len(ids) == len(set(ids)), "duplicate memory ids"
    by_id = {m.id: m for m in MEMORIES}
    for query in QUERIES:
        for rid in query.relevant:
            assert visible_to(by_id[rid], query.tenant, query.user, query.subject), (query.id, rid)


FACT_COLUMNS = (
    "fact_id", "tenant_id", "owner_user_id", "subject_id", "category", "memory_type", "content", "importance",
    "visibility", "source_conversation_id", "embedding", "embedding_model", "extracted_by", "prompt_version",
    "event_id", "created_at", "updated_at", "valid_from", "valid_to", "deleted_at",
)
CHUNK_COLUMNS = (
    "chunk_id", "tenant_id", "conversation_id", "user_id", "subject_id", "content", "embedding", "embedding_model",
    "message_range_start", "message_range_end", "prompt_version", "model", "event_id", "created_at",
)


def table_row(memory: Memory, vector: str, model: str, now: datetime) -> tuple[str, tuple]:
    """("facts"|"conversation_chunks", row in FACT_COLUMNS/CHUNK_COLUMNS order); `vector` in
    pgvector's text form. Deleted/superseded facts get deleted_at/valid_to set."""
    at = now - timedelta(days=memory.age_days)
    if memory.kind == "chunk":
        return "conversation_chunks", (
            memory.id, memory.tenant, memory.conversation, memory.user, memory.subject, memory.content, vector,
            model, 0, 20, "test", "test", f"ev-{memory.id}", at)
    return "facts", (
        memory.id, memory.tenant, memory.user, memory.subject, memory.category, memory.memory_type, memory.content,
        memory.importance, memory.visibility, memory.conversation, vector, model, "test", "test", f"ev-{memory.id}",
        at, at, at, now if memory.superseded else None, now if memory.deleted else None)


async def copy_rows(conn, table: str, rows: Iterable[tuple]) -> None:
    """COPY rows into facts or conversation_chunks (fast enough for the 100k bench)."""
    columns = FACT_COLUMNS if table == "facts" else CHUNK_COLUMNS
    async with conn.cursor() as cur:
        async with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                await copy.write_row(row)


async def insert_memories(conn, memories: Sequence[Memory], vectors: Sequence[str], model: str,
                          now: datetime) -> None:
    """Write memories straight into the read model (no capture pipeline involved)."""
    by_table: dict[str, list[tuple]] = {"facts": [], "conversation_chunks": []}
    for memory, vector in zip(memories, vectors, strict=True):
        table, row = table_row(memory, vector, model, now)
        by_table[table].append(row)
    for table, rows in by_table.items():
        await copy_rows(conn, table, rows)
