"""The candidates' score computed by PostgreSQL, so a large scope's search hands Python only its
best rows: the same formula as retrieval.service.relevance x scoring.score, on the columns the
search returns (docs/retrieval.md, "Seventh round")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Mapping

Method = Literal["hybrid", "vector", "keyword"]


@dataclass(frozen=True)
class Prescore:
    """What the score needs besides the row: `keep` the rows handed on (the best by this score,
    ties by kind and id), `now` the turn's time (recency is measured from it), `config` the
    ranking's settings (a retrieval.service.RetrievalConfig: its relevance settings and its
    `scoring`; not imported here, that module imports this one's caller)."""

    keep: int
    now: datetime
    config: Any

    @property
    def method(self) -> Method:
        return self.config.method

    def params(self, weights: Mapping[str, float]) -> dict:
        """The statement's parameters (`ps_*`), with the searched lexemes' IDF weights."""
        c, s, names = self.config, self.config.scoring, list(weights)
        return {"ps_keep": self.keep, "ps_now": self.now, "ps_lexemes": names,
                "ps_weights": [float(weights[name]) for name in names], "ps_total": float(sum(weights.values())),
                "ps_kw": c.keyword_weight, "ps_typical": c.keyword_length_lexemes,
                "ps_length_power": c.keyword_length_power, "ps_full": c.informative_lexemes,
                "ps_informative_power": c.informative_power, "ps_default_importance": s.default_importance,
                "ps_scale": s.importance_scale, "ps_importance_power": s.importance_power,
                "ps_fresh": s.fresh_days, "ps_stale": s.stale_days, "ps_stale_weight": s.stale_weight,
                "ps_thread": float(getattr(c, "thread_weight", 0.0))}


# The row's IDF-weighted coverage of the searched lexemes: its own and, for a question carrying
# its reply, the reply's (as rows_with_coverage scores the pair; pair_replies may later score
# the question alone, lower: the pair's is the one that can rank it higher); with a thread
# (`thread_lexemes`, items._THREAD), the query words only the thread holds at its weight.
_WORDS = "f.lexemes || COALESCE(f.reply_lexemes, '{}'::text[])"
_WEIGHTS = "unnest(%(ps_lexemes)s::text[], %(ps_weights)s::float8[]) AS w(lexeme, weight)"
_COVERAGE = (
    f"(CASE WHEN %(ps_total)s::float8 > 0 THEN (SELECT COALESCE(sum(w.weight), 0) FROM {_WEIGHTS}"
    f" WHERE w.lexeme = ANY({_WORDS})) / %(ps_total)s::float8 ELSE 0 END)"
)
_THREAD_COVERAGE = (
    f"(CASE WHEN %(ps_total)s::float8 > 0 THEN (SELECT COALESCE(sum(w.weight), 0) FROM {_WEIGHTS}"
    f" WHERE w.lexeme = ANY(f.thread_lexemes) AND NOT w.lexeme = ANY({_WORDS})) / %(ps_total)s::float8"
    " ELSE 0 END)"
)
# scoring.length_weight and service.informativeness of the row's distinct lexemes.
_LENGTH = ("(CASE WHEN %(ps_typical)s::int <= 0 OR f.doc_lexemes <= %(ps_typical)s::int THEN 1.0::float8"
           " ELSE power(%(ps_typical)s::float8 / f.doc_lexemes, %(ps_length_power)s::float8) END)")
_INFORMATIVE = ("(CASE WHEN %(ps_full)s::int <= 0 OR f.doc_lexemes >= %(ps_full)s::int THEN 1.0::float8"
                " ELSE power(greatest(f.doc_lexemes, 1)::float8 / %(ps_full)s::float8,"
                " %(ps_informative_power)s::float8) END)")
# scoring.importance_weight and scoring.recency_weight.
_IMPORTANCE = ("power((CASE WHEN f.importance IS NULL THEN %(ps_default_importance)s::int"  # greatest() skips NULLs
               " ELSE greatest(1, least(5, f.importance)) END)::float8 / %(ps_scale)s::float8,"
               " %(ps_importance_power)s::float8)")
_DAYS = "(greatest(0, extract(epoch FROM (%(ps_now)s::timestamptz - f.timestamp)))::float8 / 86400)"
_RECENCY = (f"(CASE WHEN {_DAYS} <= %(ps_fresh)s::float8 THEN 1.0::float8"
            f" WHEN {_DAYS} >= %(ps_stale)s::float8 THEN %(ps_stale_weight)s::float8"
            f" ELSE 1.0 - ({_DAYS} - %(ps_fresh)s::float8) / (%(ps_stale)s::float8 - %(ps_fresh)s::float8)"
            " * (1.0 - %(ps_stale_weight)s::float8) END)")


def unrolled_coverage_sql(terms: int) -> str:
    """_COVERAGE for `terms` searched lexemes as one expression, no subquery a row: the weight of
    each lexeme the row's words hold (`ps_l<i>`, `ps_w<i>`: term_params), added in the lexemes'
    order as sum() adds them, so the same float8 ("Eleventh round, PostgreSQL")."""
    if terms <= 0:
        return "0::float8"
    held = " + ".join(f"(CASE WHEN %(ps_l{i})s::text = ANY({_WORDS}) THEN %(ps_w{i})s::float8 ELSE 0::float8 END)"
                      for i in range(terms))
    return f"(CASE WHEN %(ps_total)s::float8 > 0 THEN ({held}) / %(ps_total)s::float8 ELSE 0 END)"


def term_params(weights: Mapping[str, float]) -> dict:
    """unrolled_coverage_sql's parameters: each searched lexeme and its weight, in order."""
    out: dict = {}
    for i, (lexeme, weight) in enumerate(weights.items()):
        out[f"ps_l{i}"], out[f"ps_w{i}"] = lexeme, float(weight)
    return out


def relevance_sql(method: Method, thread: bool = False, terms: int | None = None) -> str:
    """service.relevance of a row `f` of the search's result (`thread`: its rows carry
    `thread_lexemes`; `terms`: the number of searched lexemes, for the coverage as one
    expression, unrolled_coverage_sql, with term_params' parameters)."""
    own = _COVERAGE if terms is None else unrolled_coverage_sql(terms)
    coverage = f"({own} + %(ps_thread)s::float8 * {_THREAD_COVERAGE})" if thread else own
    if method == "vector":
        return "f.cosine"
    if method == "keyword":
        return coverage
    return f"((f.cosine + %(ps_kw)s::float8 * {coverage} * {_LENGTH}) * {_INFORMATIVE})"


def best_rows_sql(search: str, method: Method, thread: bool = False, terms: int | None = None) -> str:
    """`search` (a statement whose rows have the columns of retrieval.search.SearchRow that the
    score reads) cut to its `%(ps_keep)s` best rows by the score (ties by kind and id), in no
    order (retrieval.items.finish_sql orders them). Surfaced rows are cut like the others: the
    score is the one they rank by. `terms`: see relevance_sql."""
    final = f"{relevance_sql(method, thread, terms)} * {_IMPORTANCE} * {_RECENCY}"
    return (f"WITH found AS MATERIALIZED ({search})"
            f" SELECT f.* FROM found f ORDER BY {final} DESC, f.kind, f.item_id LIMIT %(ps_keep)s")


__all__ = ["Prescore", "best_rows_sql", "relevance_sql", "term_params", "unrolled_coverage_sql"]
