"""Sliding-window summary memory (seeds 000, 002): the pure fold and its state."""
