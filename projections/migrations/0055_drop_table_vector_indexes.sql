-- The per-table HNSW indexes are read by nothing any more (issue 25): the context and
-- /v1/search search memory_items (0020) and its own HNSW index; fact dedup ranks its scope
-- exactly (a materialized CTE, projections/facts.py) and the decision check filters by a
-- distance bound, neither through an index; the per-table searches that remain
-- (retrieval/search.py) are the benchmark's references, exact scans there. Each fact, chunk
-- and message embedding was inserted into two HNSW graphs (its table's and memory_items');
-- now into one (measured in docs/scaling.md, "The read path").
DROP INDEX IF EXISTS facts_embedding;
DROP INDEX IF EXISTS conversation_chunks_embedding;
DROP INDEX IF EXISTS message_embeddings_embedding;
