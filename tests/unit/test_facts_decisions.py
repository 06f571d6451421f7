"""The decision-matching rule: owners' decisions re-applied to re-extracted facts, order-free."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from domain.facts.decisions import Decision, FactView, applicable, resolve, similar

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


LISBON = unit(1.0, 0.1, 0.0)
LISBON_AGAIN = unit(1.0, 0.12, 0.01)  # cosine ~0.9999
PORTO = unit(1.0, 0.2, 0.1)  # cosine ~0.99 to Lisbon, but the value changed
GARDEN = unit(0.0, 0.0, 1.0)


def fact(fact_id="f-new", content="The user lives in Lisbon.", embedding=LISBON_AGAIN, owner="alice", subject="s",
         valid_from=T0, model="mini") -> FactView:
    return FactView(fact_id, owner, subject, content, embedding, model, valid_from)


def decision(action="deleted", fact_id="f-old", at=T0 + timedelta(days=1), snapshot="The user lives in Lisbon.",
             embedding=LISBON, event_id=None, owner="alice", subject="s", model="mini", **extra) -> Decision:
    return Decision(event_id or f"{action}-{at.isoformat()}", fact_id, owner, subject, action, snapshot, at,
                    embedding, model, **extra)


def test_a_decision_applies_to_its_own_fact_id_whatever_the_content_or_time():
    d = decision(at=T0 - timedelta(days=5), snapshot="something else", embedding=GARDEN)
    assert applicable([d], fact(fact_id="f-old"), 0.85) == [d]


def test_a_reextracted_fact_with_another_id_matches_by_meaning():
    d = decision()
    assert similar(d, fact(), 0.85)
    assert applicable([d], fact(), 0.85) == [d]


@pytest.mark.parametrize("change", [
    dict(owner="bob"), dict(subject="other"), dict(model="other-model"), dict(embedding=GARDEN),
    dict(content="The user lives in Porto.", embedding=PORTO),
])
def test_no_match_across_owners_subjects_models_meanings_or_changed_values(change):
    assert applicable([decision()], fact(**change), 0.85) == []


def test_a_fact_stated_again_after_the_decision_is_not_covered_by_it():
    later = fact(valid_from=T0 + timedelta(days=2))
    assert applicable([decision()], later, 0.85) == []


def test_one_matching_snapshot_brings_the_whole_group_of_that_fact():
    edit = decision("edited", at=T0 + timedelta(hours=1), new_content="The user lives in Lisbon, Portugal.")
    share = decision("shared", at=T0 + timedelta(hours=2), snapshot="The user lives in Lisbon, Portugal.",
                     embedding=GARDEN)  # the edited wording's vector no longer resembles the extracted fact
    assert [d.action for d in applicable([share, edit], fact(), 0.85)] == ["edited", "shared"]


def test_resolution_last_visibility_wins_last_edit_wins_first_delete_deletes():
    ds = [
        decision("shared", at=T0 + timedelta(hours=1)),
        decision("edited", at=T0 + timedelta(hours=2), new_content="v1", new_embedding=GARDEN,
                 new_embedding_model="mini"),
        decision("unshared", at=T0 + timedelta(hours=3)),
        decision("edited", at=T0 + timedelta(hours=4), new_content="v2", new_embedding=PORTO,
                 new_embedding_model="mini"),
        decision("deleted", at=T0 + timedelta(hours=5)),
        decision("deleted", at=T0 + timedelta(hours=6)),
    ]
    chosen = applicable(list(reversed(ds)), fact(), 0.85)
    assert chosen == ds  # arrival order does not matter
    managed = resolve(chosen, fact())
    assert (managed.visibility, managed.content, managed.deleted_at) == ("private", "v2", T0 + timedelta(hours=5))
    assert np.allclose(managed.embedding, PORTO)


def test_an_edit_embedded_by_another_model_changes_the_text_but_keeps_the_vector():
    d = decision("edited", new_content="v1", new_embedding=GARDEN, new_embedding_model="other")
    managed = resolve([d], fact())
    assert managed.content == "v1" and managed.embedding is None and managed.visibility is None


def test_no_decisions_change_nothing():
    assert resolve([], fact()).applied == () and resolve([], fact()).deleted_at is None
