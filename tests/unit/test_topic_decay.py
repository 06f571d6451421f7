"""Seed 004's decay tables: half-life by accesses, the two timelines, the consolidation table."""

from __future__ import annotations

import math

import pytest

from domain.topics.decay import (
    DEFAULT_CONFIG,
    SECONDS_PER_DAY,
    TopicConfig,
    consolidation_stage,
    decay_factor,
    half_life_seconds,
    memory_type,
    priority,
    survival_seconds,
)

DAY = SECONDS_PER_DAY
FORGET = DEFAULT_CONFIG.eviction_priority  # 0.05


def test_defaults_are_seed_004s_configuration_table():
    c = TopicConfig()
    assert (c.max_topics, c.similarity_threshold, c.base_half_life_seconds, c.max_half_life_seconds,
            c.access_threshold_for_lt, c.max_messages_per_topic, c.recent_message_keep) == (
        20, 0.7, 86400, 2592000, 5, 12, 4)
    assert (c.eviction_priority, c.title_chars, c.default_importance) == (0.05, 80, 0.5)


@pytest.mark.parametrize(
    ("access_count", "half_life_days"),
    [(0, 1), (4, 1), (5, 2), (9, 2), (10, 4), (14, 4), (15, 8), (19, 8), (20, 16), (24, 16),
     (25, 30), (29, 30), (30, 30), (1000, 30), (10**9, 30), (-3, 1)],
)
def test_half_life_doubles_every_five_accesses_up_to_thirty_days(access_count, half_life_days):
    assert half_life_seconds(access_count) == half_life_days * DAY


def test_half_life_follows_the_config():
    config = TopicConfig(base_half_life_seconds=60, max_half_life_seconds=600, access_threshold_for_lt=2)
    assert [half_life_seconds(n, config) for n in range(0, 10, 2)] == [60, 120, 240, 480, 600]


# --- seed 004's two timelines ---------------------------------------------------------------

SHORT_TERM = [(0, 1.0, False), (1, 0.5, False), (2, 0.25, False), (3, 0.125, False),
              (4, 0.0625, False), (5, 0.03125, True)]


@pytest.mark.parametrize("access_count", [0, 1, 2, 3, 4])
@pytest.mark.parametrize(("days", "expected", "deleted"), SHORT_TERM)
def test_short_term_timeline(access_count, days, expected, deleted):
    p = priority(1.0, days * DAY, access_count)
    assert p == pytest.approx(expected, rel=1e-12)
    assert (p < FORGET) is deleted


LONG_TERM = [(0, 1.0, False), (16, 0.5, False), (32, 0.25, False), (48, 0.125, False),
             (64, 0.0625, False), (80, 0.03125, True)]


@pytest.mark.parametrize("access_count", [20, 21, 22, 23, 24])
@pytest.mark.parametrize(("days", "expected", "deleted"), LONG_TERM)
def test_long_term_timeline_for_twenty_accesses(access_count, days, expected, deleted):
    p = priority(1.0, days * DAY, access_count)
    assert p == pytest.approx(expected, rel=1e-12)
    assert (p < FORGET) is deleted


# --- seed 004's consolidation table ----------------------------------------------------------

CONSOLIDATION = [  # accesses, half-life days, memory-type column, "~N days" survival
    (range(0, 5), 1, "short-term", 5),
    (range(5, 10), 2, "transitioning", 10),
    (range(10, 15), 4, "long-term", 20),
    (range(15, 20), 8, "long-term", 40),
    (range(20, 25), 16, "long-term", 80),
    (range(25, 40), 30, "long-term", 150),
]


@pytest.mark.parametrize(("accesses", "half_life_days", "stage", "seed_survival_days"), CONSOLIDATION)
def test_consolidation_table(accesses, half_life_days, stage, seed_survival_days):
    # The seed's "~N days" counts whole half-lives: the first one to fall below 5% is the
    # fifth (0.5**4 = 6.25% survives, 0.5**5 = 3.125% is forgotten), so N = 5 half-lives.
    whole_half_lives = next(k for k in range(1, 100) if 0.5 ** k < FORGET)
    assert whole_half_lives == 5
    for n in accesses:
        h = half_life_seconds(n)
        assert h == half_life_days * DAY
        assert consolidation_stage(n) == stage
        assert whole_half_lives * h == seed_survival_days * DAY
        assert priority(1.0, seed_survival_days * DAY, n) < FORGET  # gone at the seed's N days
        assert priority(1.0, (seed_survival_days - half_life_days) * DAY, n) >= FORGET  # kept a half-life earlier
        # The exact crossing lies between the two: log2(20) = 4.32 half-lives.
        exact = survival_seconds(n)
        assert exact == pytest.approx(h * math.log2(20))
        assert (seed_survival_days - half_life_days) * DAY < exact < seed_survival_days * DAY
        assert priority(1.0, exact * 0.999, n) > FORGET > priority(1.0, exact * 1.001, n)


@pytest.mark.parametrize(
    ("access_count", "kind"), [(0, "short-term"), (4, "short-term"), (5, "long-term"), (9, "long-term"),
                               (10, "long-term"), (25, "long-term")],
)
def test_memory_type_stat_is_two_valued(access_count, kind):
    # The stats field of seed 004 says "long-term" from 5 accesses (its table: "Transitioning").
    assert memory_type(access_count) == kind


def test_frequent_topics_survive_sixteen_times_longer_than_new_ones():
    assert survival_seconds(20) / survival_seconds(0) == pytest.approx(16)


# --- the pieces ------------------------------------------------------------------------------

def test_decay_factor_is_half_per_half_life_and_age_is_never_negative():
    assert decay_factor(0, 10) == 1.0
    assert decay_factor(10, 10) == 0.5
    assert decay_factor(25, 10) == pytest.approx(0.5 ** 2.5)
    assert decay_factor(-50, 10) == 1.0  # a clock running behind does not boost a topic


@pytest.mark.parametrize(("importance", "expected_days"), [(1.0, math.log2(20)), (0.5, math.log2(10)),
                                                           (0.05, 0.0), (0.01, 0.0), (0.0, 0.0)])
def test_survival_scales_with_importance(importance, expected_days):
    assert survival_seconds(0, importance=importance) == pytest.approx(expected_days * DAY)


def test_survival_threshold_is_a_parameter():
    assert survival_seconds(0, threshold=0.25) == pytest.approx(2 * DAY)
    assert survival_seconds(5, threshold=0.5) == pytest.approx(2 * DAY)


def test_priority_is_importance_times_decay():
    assert priority(0.5, 0, 0) == 0.5
    assert priority(0.8, 2 * DAY, 5) == pytest.approx(0.4)  # one 2-day half-life
    assert priority(0.0, 0, 30) == 0.0
