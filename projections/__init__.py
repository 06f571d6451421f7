"""Projectors (Kafka -> PostgreSQL), migrations and read queries."""
