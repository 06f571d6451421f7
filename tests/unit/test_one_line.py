"""Free text from a request: whitespace runs collapse; nothing but whitespace is a 422, not a 500."""

import pytest
from fastapi import HTTPException

from api.errors import one_line


def test_whitespace_runs_collapse_to_one_space():
    assert one_line("  moved\tto\n\nPorto  ", "content") == "moved to Porto"


@pytest.mark.parametrize("blank", ["", "   ", "\x1f", "\u2028\t\x1c"])  # control separators are whitespace too
def test_a_text_of_nothing_but_whitespace_is_refused_with_the_usual_shape(blank):
    with pytest.raises(HTTPException) as refused:
        one_line(blank, "content")
    assert refused.value.status_code == 422
    assert refused.value.detail == {"reason": "invalid_request", "message": "content: is blank"}
