"""HTTP read and ingest API."""
