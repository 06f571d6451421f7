"""schemathesis against the API's own OpenAPI document, over real HTTP + PostgreSQL + Kafka:
no 5xx and no status code, header or body that the document does not declare."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, response_headers_conformance, response_schema_conformance, status_code_conformance,
)

from core.settings import ApiSettings
from tests.integration.conftest import running_api

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
KEYS = {"svc": {"tenant": "tenant-a", "act_as": "any_user"}}
# uvicorn's own answer (text/plain) to a request it cannot parse, e.g. a request line over h11's
# 16 KiB limit: it comes before the app, so the OpenAPI document cannot declare it.
UVICORN_REFUSED = "Invalid HTTP request received."
EXAMPLES_PER_OPERATION = 30  # ~12 operations: a few hundred requests, a small part of the suite


async def seed(settings) -> None:
    """A conversation the generated requests can hit (ids are generated too: most miss)."""
    async with await psycopg.AsyncConnection.connect(
        settings.postgres.dsn, options=f"-c search_path={settings.pg_schema},public"
    ) as conn:
        await conn.execute("INSERT INTO conversations (tenant_id, conversation_id, user_id, last_seq, message_count)"
                           " VALUES ('tenant-a', '0', 'u', 0, 1)")
        await conn.execute(
            "INSERT INTO messages (tenant_id, conversation_id, seq, event_id, user_id, role, content, occurred_at,"
            " source_partition, source_offset) VALUES ('tenant-a', '0', 0, 'e0', 'u', 'user', 'hello', %s, 0, 0)",
            (datetime.now(UTC),))
        await conn.commit()


@pytest.mark.asyncio
async def test_every_answer_is_declared_in_the_openapi_document(settings):
    settings = settings.model_copy(update={"api": ApiSettings(api_keys=KEYS, max_wait_ms=200, produce_timeout_s=5)})
    await seed(settings)
    async with running_api(settings) as base:
        def run() -> int:
            schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
            headers = {"X-API-Key": "svc", "X-Admin-Key": "dev-admin-key"}
            calls = 0
            for result in schema.get_all_operations():
                operation = result.ok()

                @hsettings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                           suppress_health_check=list(HealthCheck))
                # Valid requests and invalid ones (wrong types, values out of range, bad headers).
                @given(st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                                 operation.as_strategy(GenerationMode.NEGATIVE)))
                def conforms(case) -> None:
                    nonlocal calls
                    response = case.call(base_url=base, headers={**(case.headers or {}), **headers}, timeout=60)
                    calls += 1
                    if response.status_code == 400 and response.text == UVICORN_REFUSED:
                        return  # the HTTP server's parser refused the request line (too long): the app never saw it
                    case.validate_response(response, checks=CHECKS)

                conforms()
            return calls

        calls = await asyncio.to_thread(run)
    assert calls >= 100  # every operation was exercised
