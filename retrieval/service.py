"""Turn-start retrieval: query text, hybrid search, seed 001's score, skip surfaced, pack, record."""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Awaitable, Callable, Literal, Mapping, Sequence

import numpy as np
import psycopg

from domain.speakers import split_prefix
from domain.topics.restore import words_of
from retrieval.request import ContextRequest
from core import telemetry
from core.embeddings import Embedder, make_embedder
from core.settings import RetrievalSettings, Settings
from retrieval.items import EXACT_SCAN_MAX_ITEMS, Prepared, prepare_items, search_items
from retrieval.prescore import Prescore
from retrieval.query_cache import CachedQueryEmbedder
from retrieval.packing import Packed, cached_line, forget_lines, pack
from retrieval.scoring import (Candidate, ScoredItem, ScoringConfig, candidate_of, length_weight, rank_key, score,
                               score_candidates, still_visible)
from retrieval.search import NO_SEQ, CommonLexemes, Scope, SearchRow, SideConnection, record_surfaced
from retrieval.snippets import snippet
from retrieval.tokens import load_tokenizer, min_tokens

Method = Literal["hybrid", "vector", "keyword"]


@dataclass(frozen=True)
class RetrievalConfig:
    scoring: ScoringConfig = ScoringConfig()
    candidate_k: int = 20
    last_messages: int = 3
    context_message_chars: int = 200
    query_chars: int = 500
    keyword_max_terms: int = 32
    keyword_max_doc_fraction: float = 0.05
    keyword_weight: float = 1.0  # RetrievalSettings.keyword_weight
    ef_search: int = 64
    method: Method = "hybrid"
    # Hits per search per table grow with the budget: at least candidate_k, this many per
    # 100 budget tokens, at most max_candidate_k.
    candidates_per_100_tokens: float = 20.0
    max_candidate_k: int = 200
    # An item surfaced at an earlier turn within this many messages is still visible: skipped.
    surfaced_window_seqs: int = 14
    # Messages longer than this are cut to their best sentences (retrieval/snippets.py).
    message_chars: int = 400
    # The earlier messages' share of the query vector (the current message weighs 1).
    context_weight: float = 0.3
    # An item with fewer distinct words than this says little ("Good to know.", "Hey Ana!"):
    # its similarity is scaled by (words / informative_lexemes) ** informative_power.
    informative_lexemes: int = 6
    informative_power: float = 0.5
    # An item longer than this many distinct words has its keyword coverage scaled by
    # (this / words) ** keyword_length_power (scoring.length_weight: a chunk covers a question's
    # words by its length alone). 0: off.
    keyword_length_lexemes: int = 35
    keyword_length_power: float = 0.75
    # A message that asks something comes with the reply that follows it, cut to this many
    # characters, and is scored with the words of both (0: questions alone, scored on their own
    # words). The answer is what the caller asks about again.
    reply_chars: int = 400
    # A question-reply pair's thread (the two messages of its session before it) holds its
    # subject: the query words only the thread holds count for the pair at this weight, and the
    # messages after a keyword hit are candidates (retrieval/items.py; 0: off, measured).
    thread_weight: float = 0.0
    # The best message lines (this many) go on with the same speaker's next turn (after a
    # question of the other's, same session): an answer spread over two turns is one line.
    continued_lines: int = 2
    # No budget spent twice: an item whose information words are this share of an included
    # item's is left out as a duplicate (retrieval/packing.py), a date counting as information
    # (a fact that resolves "yesterday" is never a duplicate of its message). Off (0): at 0.8 it
    # gained 1 hit of 65 on the generator and lost 2 of 466 on the development set (3 single-hop
    # answers were in the words a message had beyond its fact: docs/evaluation.md).
    duplicate_overlap: float = 0.0
    # A scope of up to this many items is scanned exactly, a larger one through the HNSW index.
    exact_scan_max_items: int = EXACT_SCAN_MAX_ITEMS
    # The search hands on only the best max(candidate_k, this per 100 budget tokens) candidates
    # by the ranking's score, computed by PostgreSQL (retrieval/prescore.py): a long
    # conversation's few hundred are not all carried into Python (0: all of them).
    kept_per_100_tokens: float = 0.0

    @classmethod
    def from_settings(cls, s: RetrievalSettings, method: Method = "hybrid") -> "RetrievalConfig":
        scoring = ScoringConfig(threshold=s.threshold, importance_scale=s.importance_scale,
                                importance_power=s.importance_power,
                                fresh_days=s.fresh_days, stale_days=s.stale_days, stale_weight=s.stale_weight)
        return cls(scoring, s.candidate_k, s.last_messages, s.context_message_chars, s.query_chars,
                   s.keyword_max_terms, s.keyword_max_doc_fraction, s.keyword_weight,
                   max(s.ef_search, s.candidate_k), method, s.candidates_per_100_tokens, s.max_candidate_k,
                   s.surfaced_window_seqs, s.message_chars, s.context_weight, s.informative_lexemes,
                   reply_chars=s.reply_chars, keyword_length_lexemes=s.keyword_length_lexemes,
                   keyword_length_power=s.keyword_length_power, thread_weight=s.thread_weight,
                   continued_lines=s.continued_lines, kept_per_100_tokens=s.kept_per_100_tokens)

    def k_for(self, budget_tokens: int) -> int:
        """Hits per search per table for this budget (a bigger budget needs more candidates)."""
        scaled = math.ceil(budget_tokens * self.candidates_per_100_tokens / 100)
        return max(self.candidate_k, min(self.max_candidate_k, scaled))

    def kept_for(self, budget_tokens: int) -> int:
        """Candidates handed on by the search for this budget (0: all of them)."""
        if self.kept_per_100_tokens <= 0:
            return 0
        return max(self.candidate_k, math.ceil(budget_tokens * self.kept_per_100_tokens / 100))


@dataclass(frozen=True)
class Retrieval:
    query: str
    embedding_model: str
    packed: Packed
    rows: Mapping[str, SearchRow]  # by candidate key ("fact:<id>", "chunk:<id>", "message:<conversation>:<seq>")
    candidates: int  # distinct items the searches returned
    turn_seq: int  # the turn the request is for (before_seq, or the conversation's next seq)
    turn_time: datetime  # when that turn happened (recency is measured from it)


def query_text(current: str | None, earlier: Sequence[str], config: RetrievalConfig = RetrievalConfig()) -> str | None:
    """The current message first, then the earlier ones newest first, each cut to a few hundred
    characters, so the embedder's truncation drops the oldest context, never the question."""
    seen: set[str] = set()
    parts: list[str] = []
    for text, limit in [(current or "", config.query_chars)] + [(m, config.context_message_chars)
                                                              for m in reversed(earlier)]:
        text = " ".join(text.split())
        if text and text not in seen:  # e.g. the current message, already in the log
            seen.add(text)
            parts.append(text[:limit])
    return "\n".join(parts) if parts else None


# Words that point back at something said before: a message with one of them needs context.
_ANAPHORA = frozenset({"it", "its", "that", "this", "these", "those", "they", "them", "their", "he", "him", "his",
                       "she", "her", "there"})


def refers_back(message: str) -> bool:
    """True for a follow-up that cannot stand alone ("Which port was that again?", "How is it
    going?"): it has a pronoun or demonstrative pointing at earlier turns."""
    return any(word in _ANAPHORA for word in re.findall(r"[a-z']+", message.lower()))


async def query_vector(embedder: Embedder, text: str, has_current: bool, context_weight: float) -> np.ndarray:
    """The query embedding. A current message that stands alone is embedded alone: the last
    turns' small talk ("talk soon!") would pull greetings up (measured in docs/retrieval.md).
    A follow-up that refers back is embedded with the earlier messages, apart, and the two
    vectors added with the earlier ones weighted `context_weight`."""
    current, _, context = text.partition("\n")
    if not has_current or not context or context_weight >= 1:
        return await embedder.embed_query(text)
    if context_weight <= 0 or not refers_back(current):
        return await embedder.embed_query(current)
    first, rest = await asyncio.gather(embedder.embed_query(current), embedder.embed_query(context))
    combined = np.asarray(first, dtype=np.float32) + context_weight * np.asarray(rest, dtype=np.float32)
    return combined / max(float(np.linalg.norm(combined)), 1e-12)


def informativeness(distinct_lexemes: int, full: int, power: float = 0.5) -> float:
    """1.0 for an item of at least `full` distinct words, less for a shorter one: MiniLM puts
    "Ana: Good to know." as close to "What jobs has Ana had?" as the answer (the name carries
    the vector), so a two-word reply must not outrank a sentence that says something."""
    if full <= 0 or distinct_lexemes >= full:
        return 1.0
    return (max(distinct_lexemes, 1) / full) ** power


def relevance(row: SearchRow, method: Method, keyword_weight: float, full_lexemes: int = 0,
              power: float = 0.5, typical_lexemes: int = 0, length_power: float = 0.75) -> float:
    """The `similarity` of seed 001's formula. vector: the cosine; keyword: the IDF-weighted
    share of the query's words the item contains; hybrid: the cosine plus that share x weight
    (the share scaled down for an item longer than `typical_lexemes`: scoring.length_weight),
    scaled down for items of very few words (informativeness)."""
    if method == "vector":
        return row.cosine
    if method == "keyword":
        return row.keyword_score
    coverage = row.keyword_score * length_weight(row.doc_lexemes, typical_lexemes, length_power)
    return (row.cosine + keyword_weight * coverage) * informativeness(row.doc_lexemes, full_lexemes, power)


def config_relevance(row: SearchRow, config: "RetrievalConfig") -> float:
    """`relevance` with the config's settings."""
    return relevance(row, config.method, config.keyword_weight, config.informative_lexemes,
                     config.informative_power, config.keyword_length_lexemes, config.keyword_length_power)


def key(kind: str, item_id: str) -> str:
    return f"{kind}:{item_id}"


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def message_text(row: SearchRow, config: RetrievalConfig, lexemes: Sequence[str] = ()) -> str:
    """A message's line content: its best sentences, and for a question the reply after it
    ("Which database should we use? → assistant: PostgreSQL: ..."), which is scored with the
    question (the reply is then not a candidate of its own: see pair_replies)."""
    text = snippet(row.content, lexemes, config.message_chars)
    if not row.reply or config.reply_chars <= 0:
        return text
    reply = " ".join(snippet(row.reply, lexemes, config.reply_chars).split())
    # "Name: text" chats name their speakers; otherwise the role does ("PostgreSQL: ..." is no name).
    named = split_prefix(row.content)[0] is not None and split_prefix(reply)[0] is not None
    speaker = "" if named or not row.reply_role else f"{row.reply_role}: "
    return f"{text} → {speaker}{reply}"


def continue_best(kept: Sequence[ScoredItem], rows: Mapping[str, SearchRow], lines: int,
                  chars: int) -> list[ScoredItem]:
    """Of the best `lines` message lines, those whose row carries the turn the answer may go on
    in (`SearchRow.continued`) show it after theirs ("… Jolene: I read "Avalanche" too."), cut
    to `chars` from its start; the rank is unchanged (the line is longer: packing counts it).
    A lower line is never continued: its longer line would take the room of the next items."""
    out: list[ScoredItem] = []
    for item in kept:
        row = rows.get(item.candidate.item_id) if lines > 0 and item.candidate.kind == "message" else None
        if row is not None:
            lines -= 1
            if row.continued:
                text = " ".join(snippet(row.continued, (), chars).split())
                named = split_prefix(row.content)[0] is not None and split_prefix(text)[0] is not None
                speaker = "" if named or not row.role else f"{row.reply_role or row.role}: "
                item = ScoredItem(replace(item.candidate, content=f"{item.candidate.content} … {speaker}{text}"),
                                  item.score)
        out.append(item)
    return out


def reply_key(row: SearchRow) -> str | None:
    """The candidate key of the reply a question row carries, if it carries one."""
    if row.kind != "message" or not row.reply or row.range_start is None:
        return None
    return key("message", f"{row.conversation_id}:{row.range_start + 1}")


def alone(row: SearchRow) -> SearchRow:
    """A question row without the reply it carried, scored on its own words."""
    score = row.keyword_score if row.own_keyword_score is None else row.own_keyword_score
    # `replace` without its __init__ (SearchRow has no __post_init__): the row's fields copied,
    # five changed (what scoring.frozen_maker does for a new row).
    made = object.__new__(SearchRow)
    made.__dict__.update(row.__dict__, reply=None, reply_role=None, reply_lexemes=None, keyword_score=score,
                         own_keyword_score=None)
    return made


def pair_replies(rows: Sequence[SearchRow], config: RetrievalConfig) -> list[SearchRow]:
    """Each reply is shown once: a question row that carries a reply which the searches found
    on its own too keeps it only if the pair (scored with the words of both) is the more
    relevant; otherwise the reply stands alone and the question goes without it, scored on its
    own words. A reply that asks something in turn stays a row of its own, with its own reply
    ("See how happy they are? -> How long do you walk them for?" -> "About an hour."). With replies off (`reply_chars` 0) every question is scored and shown alone."""
    if not any(r.reply for r in rows):  # no question carries a reply
        return list(rows)
    if config.reply_chars <= 0:
        return [alone(r) if r.reply else r for r in rows]
    by_key = {key(r.kind, r.item_id): r for r in rows}

    def rel(row: SearchRow) -> float:
        return config_relevance(row, config)

    carried: set[str] = set()
    out: list[SearchRow] = []
    for row in rows:
        reply = by_key.get(reply_key(row) or "")
        if reply is not None and rel(reply) > rel(row):
            row = alone(row)
        elif reply is not None and not reply.reply:  # a reply that asks in turn is the next exchange's row
            carried.add(key(reply.kind, reply.item_id))
        out.append(row)
    return [r for r in out if key(r.kind, r.item_id) not in carried]


def to_candidates(rows: Sequence[SearchRow], config: RetrievalConfig, lexemes: Sequence[str] = (),
                  keys: Sequence[str] | None = None) -> list[Candidate]:
    """One Candidate per row (`keys`: the rows' candidate keys, if the caller made them already)."""
    out = []
    for i, r in enumerate(rows):
        out.append(candidate_of(  # Candidate(...) with every field, without the frozen __init__
            keys[i] if keys is not None else key(r.kind, r.item_id), r.kind,
            message_text(r, config, lexemes) if r.kind == "message" else r.content, config_relevance(r, config),
            r.timestamp.timestamp(), r.importance, r.category, r.visibility, r.range_start, r.range_end,
            _ts(r.occurred_start), _ts(r.occurred_end), r.role))
    return out


def rank_all(rows: Sequence[SearchRow], now: float, config: RetrievalConfig = RetrievalConfig()) -> list[ScoredItem]:
    """Every candidate scored and ordered best first, ignoring threshold and surfaced flags
    (what recall@k is measured on)."""
    items = [ScoredItem(c, score(c, now, config.scoring)) for c in to_candidates(rows, config)]
    return sorted(items, key=rank_key)


@dataclass(frozen=True)
class Turn:
    earlier: list[str]  # the last messages before the turn, oldest first
    seq: int  # the turn's seq: before_seq, or the seq after the conversation's newest message
    time: datetime  # the newest message's occurred_at before the turn (wall clock if none)


# The conversation's newest messages before the turn, newest first (turn_from reads them).
TURN_SQL = (
    "SELECT content, occurred_at FROM messages WHERE tenant_id = %s AND conversation_id = %s"
    " AND (%s::int IS NULL OR seq < %s::int) ORDER BY seq DESC LIMIT %s"
)


def turn_params(request: ContextRequest, n: int) -> tuple:
    """TURN_SQL's parameters, for a caller that sends it with other reads (api/turn_context.py)."""
    return (request.tenant_id, request.conversation.conversation_id, request.before_seq, request.before_seq,
            max(n, 1))


async def turn_of(conn: psycopg.AsyncConnection, request: ContextRequest, n: int) -> Turn:
    """The conversation's last `n` messages before `before_seq` and when the turn happens: the
    event time of the newest message before it, so a replayed log ranks as it did live."""
    cur = await conn.execute(TURN_SQL, turn_params(request, n))
    return turn_from(request, await cur.fetchall(), n)


def turn_from(request: ContextRequest, recent: Sequence[tuple[str, datetime]], n: int) -> Turn:
    """The Turn from the conversation's newest messages before `before_seq`, newest first, as
    (content, occurred_at): at least max(n, 1) of them, or every one there is."""
    seq = request.before_seq if request.before_seq is not None else request.conversation.last_seq + 1
    when = recent[0][1] if recent else request.now
    return Turn([content for content, _ in reversed(recent[:n])] if n > 0 else [], seq, when)


async def earlier_messages(conn: psycopg.AsyncConnection, request: ContextRequest, n: int) -> list[str]:
    """The conversation's last `n` messages before `before_seq`, oldest first."""
    return (await turn_of(conn, request, n)).earlier if n > 0 else []


def scope_of(request: ContextRequest, verbatim_from_seq: int | None = None) -> Scope:
    """Messages of this conversation at or after the turn, or already in the response's
    verbatim gap (from `verbatim_from_seq` on), are never candidates."""
    bounds = [b for b in (request.before_seq, verbatim_from_seq) if b is not None]
    return Scope(request.tenant_id, request.user_id, request.subject_id, request.conversation.conversation_id,
                 min(bounds, default=NO_SEQ))


_LINE_TOKENS: dict[str, int] = {}  # a process-wide cache of a pure function, bounded below


def remember_tokens(lines: Sequence[str]) -> None:
    """Count the lines not yet cached in one batch call of the tokenizer."""
    missing = [line for line in dict.fromkeys(lines) if line not in _LINE_TOKENS]
    if missing:
        if len(_LINE_TOKENS) + len(missing) > 8192:
            _LINE_TOKENS.clear()
        for line, encoding in zip(missing, load_tokenizer().encode_batch(missing, add_special_tokens=False)):
            _LINE_TOKENS[line] = len(encoding.ids)


def line_tokens(line: str) -> int:
    """count_tokens of one line (no newline in it), with the process-wide cache."""
    tokens = _LINE_TOKENS.get(line)
    if tokens is None:
        if len(_LINE_TOKENS) >= 8192:
            _LINE_TOKENS.clear()
        tokens = _LINE_TOKENS[line] = len(load_tokenizer().encode(line, add_special_tokens=False).ids)
    return tokens


def forget_texts() -> None:
    """Empty every process-wide cache the read path keeps of memory text: the lines' token
    counts, the rendered lines and the restored archive's words. They are pure functions of the
    text, bounded, and serve nothing erased once the rows are gone; an erasure empties them in
    the API process that takes it (api/routes/erasure.py) so the erased text is not left in that
    process's memory either (docs/lineage.md)."""
    _LINE_TOKENS.clear()
    forget_lines()
    words_of.cache_clear()


def tokens_at_least(line: str) -> int:
    """A lower bound of line_tokens for packing: the exact count when the process has counted
    the line before (the same lines come back context after context: a dict lookup), else
    tokens.min_tokens (a regex over the line: 4 % of the API's samples under load when run for
    every candidate line, "Tenth round"). Either never exceeds the exact count."""
    tokens = _LINE_TOKENS.get(line)
    return min_tokens(line) if tokens is None else tokens


def count_lines(text: str) -> int:
    """count_tokens, line by line with a cache: exact for the WordPiece tokenizer (a newline is
    whitespace and no token spans it), and pack() re-counts the joined text at every step."""
    lines = text.split("\n")
    remember_tokens(lines)
    return sum(_LINE_TOKENS[line] for line in lines)


async def search_rows(conn: psycopg.AsyncConnection, scope: Scope, text: str, embedder: Embedder,
                      config: RetrievalConfig, keyword_text: str | None = None,
                      common: CommonLexemes | None = None, k: int | None = None,
                      vector: np.ndarray | Awaitable[np.ndarray] | None = None,
                      side: SideConnection | None = None, prepared: Prepared | None = None,
                      then_commit: bool = False, prescore: Prescore | None = None) -> list[SearchRow]:
    """One query embedding of `text`, then one statement over memory_items holding, per kind,
    both searches (retrieval/items.py); the keyword search uses `keyword_text` (default: `text`)
    minus the tenant's common lexemes. Rows' keyword_score is their IDF-weighted coverage of
    the searched lexemes. `vector`: the query embedding, if made already, or an awaitable of
    it. The embedding runs while the keywords are prepared (one statement: their lexemes, the
    document frequencies and the scope's size, all kept on write).
    `common` is accepted for callers of the per-table search (retrieval/search.py) and not
    needed here: the statistics come from memory_lexicon. `side`: other connections, to
    search the kinds of a large scope at the same time (items.search_items). `prepared`: the
    prepare statement's result if the caller sent it already, in this transaction, with
    `prepare_plan`'s arguments (api/turn_context.py sends it with the context's other reads).
    `then_commit`: the search ends the transaction (items.search_items). `prescore`: only the
    best rows by the score PostgreSQL computes (items.search_items, prescore_for)."""
    ef_search = max(config.ef_search, k or 0)
    embedding = embedder.embed_query(text) if vector is None else vector
    if prepared is None:
        prepare = prepare_items(conn, scope, ef_search, keyword_text if keyword_text is not None else text,
                                config.keyword_max_terms, config.keyword_max_doc_fraction)
        if isinstance(embedding, np.ndarray):
            prepared = await prepare
        else:
            embedding, prepared = await both(embedding, prepare)
    elif not isinstance(embedding, np.ndarray):
        embedding = await embedding
    return await search_items(conn, scope, embedding, prepared, k or config.candidate_k,
                              use_vector=config.method != "keyword", use_keyword=config.method != "vector",
                              exact_max_items=config.exact_scan_max_items, side=side, ef_search=ef_search,
                              then_commit=then_commit, thread_weight=config.thread_weight,
                              continued=config.continued_lines > 0, prescore=prescore)


async def both(first: Awaitable[Any], second: Awaitable[Any]) -> tuple[Any, Any]:
    """Both results, run concurrently; if either fails, the error is raised only once both are
    done (nothing is left running on the request's connection)."""
    results = await asyncio.gather(first, second, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results[0], results[1]


async def retrieve(conn: psycopg.AsyncConnection, request: ContextRequest, embedder: Embedder,
                   config: RetrievalConfig = RetrievalConfig(), *, common: CommonLexemes | None = None,
                   record: bool = True, verbatim_from_seq: int | None = None,
                   recent: Sequence[tuple[str, datetime]] | None = None,
                   side: SideConnection | None = None,
                   keep: Callable[[SearchRow], bool] | None = None,
                   prepared: Prepared | None = None, then_commit: bool = False) -> Retrieval | None:
    """None when there is nothing to search with (no query, no earlier messages). Included
    items are recorded as surfaced at this turn and the facts' access counts bumped, then
    committed (`record=False` leaves the database untouched). Messages of this conversation
    from `verbatim_from_seq` on (the response's verbatim gap) are not searched. `recent`: the
    newest messages before the turn if the caller read them already (see turn_from). `side`:
    other connections, to search the tables at the same time (search_all). `keep`: only the
    candidates it accepts are ranked (the judge's "as of the turn", runtime/judge.py).
    `prepared`: the prepare statement's result, sent by the caller with `prepare_plan`'s
    arguments (only for a request with a current message: the keywords are its lexemes).
    `then_commit`: the transaction ends with the search (a read with nothing else to do in it;
    the surfaced record, if any, is then a transaction of its own)."""
    turn = (turn_from(request, recent, config.last_messages) if recent is not None
            else await turn_of(conn, request, config.last_messages))
    text = query_text(request.query, turn.earlier, config)
    if text is None:
        return None
    scope = scope_of(request, verbatim_from_seq)
    # Keywords come from the current message alone when there is one: the earlier turns
    # add context to the embedding, but their small talk would match half the table.
    current = request.query if request.query and request.query.strip() else None
    k = config.k_for(request.budget_tokens)
    vector = query_vector(embedder, text, current is not None, config.context_weight)  # awaited with the keywords
    rows = pair_replies(await telemetry.traced("retrieval search", search_rows(
        conn, scope, text, embedder, config, current, common, k, vector, side,
        prepared if current is not None else None, then_commit,
        prescore_for(config, request.budget_tokens, turn.time) if keep is None else None)), config)
    if keep is not None:
        rows = [r for r in rows if keep(r)]
    keys = [key(r.kind, r.item_id) for r in rows]  # made once, for the map and the candidates
    by_key = dict(zip(keys, rows))
    visible = {k for k, r in by_key.items()
               if r.surfaced_seqs and still_visible(r.surfaced_seqs, turn.seq, config.surfaced_window_seqs)}
    lexemes = sorted({lexeme for r in rows if r.lexemes for lexeme in r.lexemes})
    scored = score_candidates(to_candidates(rows, config, lexemes, keys), turn.time.timestamp(), visible,
                              config.scoring)
    kept = continue_best(scored.kept, by_key, config.continued_lines, config.message_chars)
    # What the model still sees from an earlier turn is not dropped, only put last: it fills
    # the room new items leave (seed 001 avoids repetition; it does not want an empty section).
    repeats = [ScoredItem(e.candidate, e.score) for e in scored.excluded
               if e.reason == "already_surfaced" and e.score.final > config.scoring.threshold]
    others = [e for e in scored.excluded if not (e.reason == "already_surfaced"
                                                 and e.score.final > config.scoring.threshold)]
    # Lines counted one by one, and only those whose lower bound still fits: once the budget is
    # nearly full most candidates are left out without running the tokenizer.
    with telemetry.span("retrieval pack"):
        packed = pack(kept, request.budget_tokens, line_tokens, others, repeats, additive=True,
                      lower_bound=tokens_at_least, duplicate_overlap=config.duplicate_overlap, render=cached_line)
    if record and packed.included:
        chosen = [(by_key[p.item.candidate.item_id].kind, by_key[p.item.candidate.item_id].item_id)
                  for p in packed.included]
        await record_surfaced(conn, scope, chosen, request.now, turn.seq, commit=True)
    return Retrieval(text, embedder.model, packed, by_key, len(by_key), turn.seq, turn.time)


def prescore_for(config: RetrievalConfig, budget_tokens: int, now: datetime) -> Prescore | None:
    """The search's cut to `config.kept_for(budget_tokens)` rows by the ranking's own score at
    `now` (the turn's time), or None when it is off."""
    keep = config.kept_for(budget_tokens)
    if keep <= 0:
        return None
    return Prescore(keep, now, config)


def prepare_plan(request: ContextRequest, config: RetrievalConfig) -> tuple[Scope, int, str] | None:
    """(scope, ef_search, keyword text) of the prepare statement `retrieve` would send for this
    request, known before the conversation's messages are read when it has a current message
    (its keywords are that message's words), else None. A caller may send it early
    (items.prepare_params) and pass the result to `retrieve` as `prepared`."""
    if not (request.query and request.query.strip()):
        return None
    return scope_of(request), max(config.ef_search, config.k_for(request.budget_tokens)), request.query


def embedder_for(app_state: Any) -> Embedder:
    """One embedder per app, made on first use (the local model loads on its first call), its
    query vectors cached by (model, text) in a small LRU."""
    embedder = getattr(app_state, "retrieval_embedder", None)
    if embedder is None:
        embedder = CachedQueryEmbedder(make_embedder(query_embedding_settings(app_state.settings)))
        app_state.retrieval_embedder = embedder
    return embedder


def document_embedder_for(app_state: Any) -> Embedder:
    """The API's embedder for documents (a stored memory, an edited fact): made with the embedding
    settings the worker has, so a document's vector, in its event and in public.embedding_cache
    under the model's name, is the one the worker makes. The query embedder when both graphs are
    the same; one of its own, made on first use, when questions run as integer products
    (`retrieval.query_integer_matmul`) and documents do not."""
    settings = app_state.settings
    if query_embedding_settings(settings).embedding.integer_matmul == settings.embedding.integer_matmul:
        return embedder_for(app_state)
    embedder = getattr(app_state, "document_embedder", None)
    if embedder is None:
        embedder = app_state.document_embedder = make_embedder(settings)
    return embedder


def query_embedding_settings(settings: Settings) -> Settings:
    """The settings the API's query embedder is made with: `retrieval.query_embedding_threads`
    ONNX Runtime threads per query unless the embedding settings name a number themselves, and
    the weights as integer products when `retrieval.query_integer_matmul` says so."""
    update: dict[str, Any] = {}
    threads = settings.retrieval.query_embedding_threads
    if threads and not settings.embedding.intra_op_threads:
        update["intra_op_threads"] = threads
    if settings.retrieval.query_integer_matmul and not settings.embedding.integer_matmul:
        update["integer_matmul"] = True
    if not update:
        return settings
    return settings.model_copy(update={"embedding": settings.embedding.model_copy(update=update)})


def common_lexemes_for(app_state: Any) -> CommonLexemes:
    common = getattr(app_state, "retrieval_common_lexemes", None)
    if common is None:
        retrieval = app_state.settings.retrieval
        common = CommonLexemes(retrieval.keyword_max_doc_fraction, idf_ttl_s=retrieval.keyword_idf_cache_s)
        app_state.retrieval_common_lexemes = common
    return common


async def warm_up(app_state: Any) -> None:
    """Load the model before the first request needs it (call from a startup hook)."""
    await embedder_for(app_state).embed_query("warm up")
