"""Pure rules of seed 004 topic memory: topic state types, LRU decay, compressed archive format."""
