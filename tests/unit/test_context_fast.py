"""The context route's fast path accepts only what FastAPI accepts, with the same values."""

from __future__ import annotations

import itertools

import pytest
from fastapi.dependencies.utils import request_params_to_args

from api.routes.context import router
from api.routes.context_fast import ContextRoute, plain_arguments, spec_of

ROUTE = next(r for r in router.routes if r.path.endswith("/context"))
SPEC = spec_of(ROUTE)
NUMBERS = ["0", "5", "05", "+5", " 5", "5 ", "-1", "1e3", "5.0", "", "٣", "1_000", "60000", "60001", "8000", "8001",
           "2147483647", "2147483648", "99999999999"]
TEXTS = ["abc", "a.b:c@d-e_f", "a\n", "a b", "-a", "ä", "", "a" * 200, "a" * 201, "x" * 8000, "x" * 8001]


def fastapi_values(fields, received):
    values, errors = request_params_to_args(fields, received)
    return None if errors else values


def test_the_context_route_is_served_by_the_fast_path():
    assert isinstance(ROUTE, ContextRoute) and SPEC is not None
    assert set(SPEC.query) == {f.alias for f in ROUTE.dependant.query_params}
    assert [p.key for p in SPEC.headers] == ["x-user-id"] and [p.name for p in SPEC.path] == ["conversation_id"]


@pytest.mark.parametrize("name,value", [(n, v) for n in ("before_seq", "wait_ms", "budget_tokens") for v in NUMBERS]
                         + [(n, v) for n in ("query", "user_id", "subject_id") for v in TEXTS])
def test_a_query_value_the_fast_path_takes_is_the_value_fastapi_validates(name, value):
    fast = plain_arguments(SPEC, {"conversation_id": "c1"}, [(name, value)], {})
    slow = fastapi_values(ROUTE.dependant.query_params, {name: value})
    if fast is not None:  # what it takes, FastAPI takes, as the same value; else FastAPI decides
        assert slow is not None and fast[name] == slow[name] and type(fast[name]) is type(slow[name])
    if value in ("5", "0", "abc") or (name == "query" and value in TEXTS[:-1]):
        assert fast is not None  # the usual values do take the fast path


@pytest.mark.parametrize("value", TEXTS)
def test_path_and_header_values_are_taken_only_as_fastapi_takes_them(value):
    for path, header in ((value, []), ("c1", [value])):
        fast = plain_arguments(SPEC, {"conversation_id": path}, [], {"x-user-id": header})
        slow_path = fastapi_values(ROUTE.dependant.path_params, {"conversation_id": path})
        slow_header = fastapi_values(ROUTE.dependant.header_params, {"X-User-Id": header[0]} if header else {})
        if fast is not None:
            assert slow_path == {"conversation_id": path} and fast["conversation_id"] == path
            assert slow_header is not None and fast["x_user_id"] == slow_header["x_user_id"]


def test_defaults_are_fastapi_s_and_repeats_go_to_fastapi():
    fast = plain_arguments(SPEC, {"conversation_id": "c1"}, [("query", "hi"), ("other", "x")], {})
    slow = fastapi_values(ROUTE.dependant.query_params, {"query": "hi"})
    assert fast == {**slow, "conversation_id": "c1", "x_user_id": None}
    assert plain_arguments(SPEC, {"conversation_id": "c1"}, [("query", "a"), ("query", "b")], {}) is None
    assert plain_arguments(SPEC, {"conversation_id": "c1"}, [], {"x-user-id": ["u1", "u1"]}) is None
    combos = itertools.product(["1", "x"], ["u1", "u 1"])
    assert [plain_arguments(SPEC, {"conversation_id": "c1"}, [("min_seq", n), ("user_id", u)], {}) is not None
            for n, u in combos] == [True, False, False, False]
