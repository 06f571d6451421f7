"""Local launchers for Kafka and PostgreSQL, with no Docker."""
