-- Erasure requests in flight (api/erasure_requests.py, docs/security.md "Erasure requests"):
-- one row per erased user or conversation, naming the erasure event the API appended last.
-- While that event is not applied (no `erasures` row) and younger than the API's bound, a
-- repeated request is answered with it instead of appending another erasure.
CREATE TABLE erasure_requests (
    tenant_id    text        NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('user', 'conversation')),
    target_id    text        NOT NULL,
    event_id     text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, kind, target_id)
);
