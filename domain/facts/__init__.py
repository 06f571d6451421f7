"""Pure rules of seed 001/003 facts: dedup and contradiction, ordering decisions, stored ids."""
