"""Plumbing shared by the stream processor, the projectors and the API: the database pool,
dead letters, poison isolation, outage waits, fetch pacing, the Kafka producer client and
the model factories. Imports only the ground (`schemas/`, `core/`) and `domain/`."""
