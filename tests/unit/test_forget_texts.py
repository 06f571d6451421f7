"""An erasure empties the read path's in-process caches of memory text in the API process that
takes it (the query vectors, the lines, their token counts, a restored archive's words): the
erased words are not left in that process's memory (docs/lineage.md)."""

from __future__ import annotations

from types import SimpleNamespace

from api.routes.erasure import forget_query_vectors
from domain.topics.restore import words_of
from retrieval import packing, service
from retrieval.packing import cached_line
from retrieval.scoring import Candidate, ScoreBreakdown, ScoredItem

SECRET = "Alice's passport number is X1234567"


def _held() -> dict[str, bool]:
    """Which caches hold the secret."""
    return {"lines": any(SECRET in line for line in packing._LINES.values()),
            "tokens": any(SECRET in line for line in service._LINE_TOKENS),
            "words": words_of.cache_info().currsize > 0}


def _fill() -> None:
    line = cached_line(ScoredItem(Candidate("f1", "fact", SECRET, 1.0, 0.0), ScoreBreakdown(1.0, 1.0, 1.0, 1.0)))
    service.remember_tokens([line])
    words_of(SECRET)


class _Embedder:
    def __init__(self) -> None:
        self.cleared = 0

    def clear(self) -> None:
        self.cleared += 1


def test_forget_texts_empties_every_cache_of_memory_text():
    _fill()
    assert _held() == {"lines": True, "tokens": True, "words": True}
    service.forget_texts()
    assert _held() == {"lines": False, "tokens": False, "words": False}


def test_the_erasure_route_forgets_the_texts_and_the_query_vectors():
    _fill()
    embedder = _Embedder()
    forget_query_vectors(SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(retrieval_embedder=embedder))))
    assert embedder.cleared == 1
    assert _held() == {"lines": False, "tokens": False, "words": False}


def test_the_erasure_route_forgets_the_conversations_users_and_subjects():
    """The context route remembers each conversation's user and subject for its guessed first
    read (api.routes.context._remember): identifiers of the erased user among them go too."""
    state = SimpleNamespace(conversation_owners={("tenant-a", "c1"): ("erased-user", "their-subject")})
    forget_query_vectors(SimpleNamespace(app=SimpleNamespace(state=state)))
    assert state.conversation_owners == {}
