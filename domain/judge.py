"""Judging a generation on recorded turns (issue 26): pure scoring, comparison and the gate.

The label-free signal of a turn's context is its *foresight*: the share of what came next in
the log (the continuation: the reply after the turn and the next messages of the conversation)
whose content words the context already held. Content words are lowercased words of three or
more letters (or with a digit) that are not stop words or chat filler, and not in the turn's own
message (the caller says those anyway). Named things (capitalised words inside a sentence,
numbers) are counted apart: they are what memory is for."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from statistics import mean
from typing import Iterable, Sequence

# The answer-word scorer's stop words (bench/ctx_scoring.py), plus the filler of chat replies
# that any text holds ("really", "think", "great"): without them a long context "foresees"
# every reply.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before being below between
both but by can cannot could couldn did didn do does doesn doing don down during each few for from further had
hadn has hasn have haven having he her here hers herself him himself his how i if in into is isn it its itself
just let me more most much my myself no nor not now of off on once only or other ought our ours ourselves out
over own same shan she should shouldn so some such than that the their theirs them themselves then there these
they this those through to too under until up very was wasn we were weren what when where which while who whom
why will with won would wouldn yes you your yours yourself yourselves s t d ll m re ve o y also likely one
""".split())
FILLER = frozenset("""
actually again ago already always amazing anything anyway awesome back bad best better big bit cool could day
definitely did does doing done else even ever every everything feel feeling fine first for fun get gets getting
glad going gone good got great guess happy hear hey hi hope how interesting know last later lately let like
little lol long look looking lot lots love make many maybe mean might much need never new next nice nope now
okay oh ok pretty probably quite really right said say see seems should sound sounds still stuff sure take talk
tell thank thanks thing things think thought time today told totally try want way well what whole wow yeah yes
yet yep
""".split())
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
_SENTENCE_END = re.compile(r"[.!?:\n]\s*$")


def terms(text: str, drop: Iterable[str] = ()) -> set[str]:
    """Distinct content words of `text`, lowercased, minus stop words, filler and `drop`."""
    dropped = set(drop)
    out: set[str] = set()
    for match in _WORD.finditer(text or ""):
        word = match.group(0).lower().strip("'-")
        if word.endswith("'s"):
            word = word[:-2]
        if (len(word) >= 3 or any(c.isdigit() for c in word)) and word not in STOP_WORDS \
                and word not in FILLER and word not in dropped:
            out.add(word)
    return out


def named(text: str) -> set[str]:
    """Named things: words capitalised inside a sentence, and numbers (lowercased)."""
    out: set[str] = set()
    text = text or ""
    for match in _WORD.finditer(text):
        word = match.group(0)
        before = text[:match.start()]
        starts_sentence = not before.strip() or bool(_SENTENCE_END.search(before))
        if any(c.isdigit() for c in word) or (word[0].isupper() and not starts_sentence):
            lowered = word.lower().strip("'-")
            lowered = lowered[:-2] if lowered.endswith("'s") else lowered
            if lowered not in STOP_WORDS and len(lowered) >= 2:
                out.add(lowered)
    return out


@dataclass(frozen=True)
class Foresight:
    """How much of the continuation's content a context held (None: nothing to foresee)."""

    score: float | None  # share of the continuation's content words in the context
    named_score: float | None  # the same for its named things
    wanted: int
    held: int


def foresight(context: str, continuation: str, query: str | None = None) -> Foresight:
    known = terms(query or "")
    wanted = terms(continuation, drop=known)
    present = terms(context)
    held = len(wanted & present)
    names = named(continuation) - known
    return Foresight(held / len(wanted) if wanted else None,
                     len(names & present) / len(names) if names else None, len(wanted), held)


def answer_score(answer: str, context: str) -> float:
    """The labelled score (bench/ctx_scoring.py's): the share of the answer's content words
    (stop words dropped; filler kept, an answer is short) among the context's words."""
    wanted = {w for w in re.findall(r"\w+", answer.lower().replace("_", " ")) if w not in STOP_WORDS}
    if not wanted:
        return 1.0
    present = set(re.findall(r"\w+", context.lower().replace("_", " ")))
    return len(wanted & present) / len(wanted)


HIT = 0.8  # an answer counts as found when this share of its words is in the context


@dataclass(frozen=True)
class Side:
    """One generation's context for a turn, as the judge sees it."""

    items: dict[str, int]  # "kind:id" -> tokens, the retrieved items
    summary: str | None  # "start-end" of the summary used, if any
    text: str  # everything the context holds: summary, gap, retrieved lines, topic
    texts_by_kind: dict[str, str] = field(default_factory=dict)  # "summary", "gap", "fact", "chunk", ...

    @property
    def tokens(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True)
class TurnJudgement:
    conversation: str
    turn_seq: int
    kept: list[str]
    lost: list[str]
    gained: list[str]
    tokens_a: int
    tokens_b: int
    summary_a: str | None
    summary_b: str | None
    foresight_a: Foresight
    foresight_b: Foresight
    error: str | None = None

    def as_dict(self) -> dict:
        return {"conversation": self.conversation, "turn_seq": self.turn_seq, "kept": len(self.kept),
                "lost": self.lost, "gained": self.gained, "tokens_a": self.tokens_a, "tokens_b": self.tokens_b,
                "summary_a": self.summary_a, "summary_b": self.summary_b,
                "foresight_a": self.foresight_a.score, "foresight_b": self.foresight_b.score,
                "named_a": self.foresight_a.named_score, "named_b": self.foresight_b.named_score,
                "error": self.error}


def judge_turn(conversation: str, turn_seq: int, a: Side, b: Side, continuation: str,
               query: str | None) -> TurnJudgement:
    return TurnJudgement(
        conversation, turn_seq, sorted(a.items.keys() & b.items.keys()), sorted(a.items.keys() - b.items.keys()),
        sorted(b.items.keys() - a.items.keys()), a.tokens, b.tokens, a.summary, b.summary,
        foresight(a.text, continuation, query), foresight(b.text, continuation, query))


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(mean(present), 4) if present else None


def summarize(turns: Sequence[TurnJudgement], margin: float = 0.01) -> dict:
    """Overall figures: items and tokens, the mean foresight of each side over the turns
    where both have one, and the verdict: better / worse / same within `margin`."""
    scored = [t for t in turns if t.error is None and t.foresight_a.score is not None
              and t.foresight_b.score is not None]
    a = _mean(t.foresight_a.score for t in scored)
    b = _mean(t.foresight_b.score for t in scored)
    delta = None if a is None or b is None else round(b - a, 4)
    wins = sum(t.foresight_b.score > t.foresight_a.score for t in scored)
    losses = sum(t.foresight_b.score < t.foresight_a.score for t in scored)
    return {
        "turns": len(turns), "scored_turns": len(scored), "errors": sum(t.error is not None for t in turns),
        "items_kept": sum(len(t.kept) for t in turns), "items_lost": sum(len(t.lost) for t in turns),
        "items_gained": sum(len(t.gained) for t in turns),
        "tokens_a": sum(t.tokens_a for t in turns), "tokens_b": sum(t.tokens_b for t in turns),
        "summary_changed": sum(t.summary_a != t.summary_b for t in turns),
        "foresight_a": a, "foresight_b": b, "delta": delta,
        "named_a": _mean(t.foresight_a.named_score for t in scored),
        "named_b": _mean(t.foresight_b.named_score for t in scored),
        "turns_better": wins, "turns_worse": losses, "turns_same": len(scored) - wins - losses,
        "margin": margin, "verdict": verdict(delta, margin),
    }


def verdict(delta: float | None, margin: float) -> str:
    if delta is None:
        return "no signal"
    if delta < -margin:
        return "worse"
    if delta > margin:
        return "better"
    return "same"


@dataclass(frozen=True)
class Gate:
    allowed: bool
    message: str


def gate(overall: dict, margin: float) -> Gate:
    """`activate B --if-better-than A`: refuse when B scores worse than A beyond `margin`."""
    delta, a, b = overall.get("delta"), overall.get("foresight_a"), overall.get("foresight_b")
    if delta is None:
        return Gate(False, "the judgement has no signal (no judged turn with a continuation): not activated")
    if delta < -margin:
        return Gate(False, f"B scores {b:.3f} against A's {a:.3f} on {overall['scored_turns']} judged turns:"
                           f" {-delta:.3f} worse, beyond the margin of {margin:.3f}: not activated")
    return Gate(True, f"B scores {b:.3f} against A's {a:.3f} on {overall['scored_turns']} judged turns"
                      f" ({delta:+.3f}, margin {margin:.3f})")


def question_scores(answer: str, sides: dict[str, Side]) -> dict[str, dict]:
    """Per generation: the answer's word share in the whole context, whether that is a hit, and
    the hits per kind of section (which part of the context held the answer)."""
    out = {}
    for name, side in sides.items():
        share = answer_score(answer, side.text)
        out[name] = {"score": round(share, 4), "hit": share >= HIT,
                     "hits_by_kind": {kind: answer_score(answer, text) >= HIT
                                      for kind, text in side.texts_by_kind.items() if text}}
    return out


def summarize_questions(rows: Sequence[dict], names: Sequence[str]) -> dict[str, dict]:
    out = {}
    for name in names:
        scores = [r["scores"][name] for r in rows if name in r.get("scores", {})]
        kinds: dict[str, int] = {}
        for s in scores:
            for kind, hit in s["hits_by_kind"].items():
                kinds[kind] = kinds.get(kind, 0) + int(hit)
        out[name] = {"questions": len(scores), "answer_words": _mean(s["score"] for s in scores),
                     "hits": sum(s["hit"] for s in scores), "hits_by_kind": kinds}
    return out
