"""What a setting does, for the settings that carry no comment in the settings module.

docs/configuration.md takes each setting's comment from the settings module; these fill in the
ones without (a new setting needs one or the other: tests/unit/test_config_reference.py).
"""

DESCRIPTIONS: dict[str, str] = {
    "MEMORY_ENVIRONMENT": "`production` refuses the development keys, keys not hashed at rest and sealing without"
                          " a master key (docs/deployment.md); `test` is what the test suite sets.",
    "MEMORY_STATE_DIR": "Where this deployment keeps its local state: the launcher's Kafka and PostgreSQL data and"
                        " logs, the worker's faust tables, replay pids and logs (docs/infra.md).",
    "MEMORY_LOG_LEVEL": "Python log level of the CLI's processes (DEBUG, INFO, WARNING, ERROR).",
    "MEMORY_KAFKA__BOOTSTRAP_SERVERS": "Kafka brokers, comma-separated host:port (the local launcher listens here).",
    "MEMORY_KAFKA__PARTITIONS": "Partitions of the topics `migrate` creates: the most worker processes that share"
                                " the stream (docs/scaling.md).",
    "MEMORY_KAFKA__REPLICATION_FACTOR": "Replicas of each topic `migrate` creates (3 on a production cluster).",
    "MEMORY_POSTGRES__DSN": "PostgreSQL with pgvector holding the read model (libpq URL or key=value string).",
    "MEMORY_POSTGRES__POOL_MIN_SIZE": "Connections each process's pool keeps open.",
    "MEMORY_POSTGRES__POOL_MAX_SIZE": "Most connections one process's pool opens (per API worker and per worker"
                                      " process: size PostgreSQL's max_connections for all of them).",
    "MEMORY_API__HOST": "Address `memory-agent api` listens on (0.0.0.0 in a container).",
    "MEMORY_API__PORT": "Port of the HTTP API.",
    "MEMORY_API__TENANT_QUEUE_MS": "How long a request waits for one of its tenant's pooled connections before a 429"
                                   " with Retry-After.",
    "MEMORY_LIMITS__MAX_CONTENT_CHARS": "Longest message content accepted at ingest (characters).",
    "MEMORY_LIMITS__MAX_ID_CHARS": "Longest tenant, user, conversation or subject id accepted.",
    "MEMORY_WINDOW__WINDOW_SIZE": "Seed 000: messages covered by one rolling summary's window.",
    "MEMORY_WINDOW__SUMMARIZE_AFTER_SEQ": "Seed 000: the first summary is requested after this seq.",
    "MEMORY_WINDOW__MAX_ATTEMPTS": "Attempts of one summary request (failures and timeouts) before it is given up.",
    "MEMORY_WINDOW__CONTEXT_MAX_GAP_BYTES": "The verbatim gap's byte budget (JSON), with context_max_gap_messages.",
    "MEMORY_LLM__BASE_URL": "The OpenAI-compatible endpoint (e.g. https://api.openai.com/v1,"
                            " http://localhost:11434/v1 for Ollama); unset: the openai client's default.",
    "MEMORY_LLM__API_KEY": "Key of the LLM endpoint (never logged).",
    "MEMORY_LLM__MODEL": "Chat model for summaries, chunk summaries, facts and topic summaries.",
    "MEMORY_LLM__TIMEOUT_S": "Longest one LLM call may take before it is retried.",
    "MEMORY_LLM__MAX_RETRIES": "Retries of one LLM call (429, 5xx, timeouts, connection errors).",
    "MEMORY_LLM__CONCURRENCY": "LLM calls in flight at once per worker process.",
    "MEMORY_LLM__SUMMARY_PROMPT_VERSION": "Window summary prompt: a file of memory_agent/prompts/ (part of the"
                                          " LLM cache key and of every summary's lineage).",
    "MEMORY_LLM__CHUNK_FACTS_PROMPT_VERSION": "Chunk summary + fact extraction prompt (memory_agent/prompts/).",
    "MEMORY_LLM__GATE_PROMPT_VERSION": "The \"worth remembering?\" gate's prompt (memory_agent/prompts/).",
    "MEMORY_LLM__BACKOFF_MAX_S": "Longest wait between two retries.",
    "MEMORY_LLM__TEMPERATURE": "Sampling temperature of every LLM call (0: as repeatable as the model allows).",
    "MEMORY_EMBEDDING__BASE_URL": "The OpenAI-compatible embeddings endpoint (provider openai).",
    "MEMORY_EMBEDDING__API_KEY": "Key of the embeddings endpoint (never logged).",
    "MEMORY_EMBEDDING__MODEL": "Embedding model; its name is recorded with every vector (a change needs a replay).",
    "MEMORY_EMBEDDING__DIMENSIONS": "Length of the model's vectors (the read model's vector columns).",
    "MEMORY_EMBEDDING__DOCUMENT_PREFIX": "Prefix of stored texts; None: the model's known prefix (see query_prefix).",
    "MEMORY_EMBEDDING__BATCH_SIZE": "Texts per embedding call.",
    "MEMORY_EMBEDDING__MAX_LENGTH": "Local model: tokens of a text that are embedded (the rest is cut).",
    "MEMORY_EMBEDDING__MAX_RETRIES": "Retries of one remote embedding call.",
    "MEMORY_EMBEDDING__CONCURRENCY": "Remote embedding calls in flight at once per process.",
    "MEMORY_TOPICS__MAX_TOPICS": "Seed 004: topics a conversation keeps in its working set.",
    "MEMORY_TOPICS__ACTIVE_TOPIC_BONUS": "Added to the active topic's cosine when a message is matched; None: the"
                                         " embedding model's measured value (docs/topics.md).",
    "MEMORY_TOPICS__BASE_HALF_LIFE_SECONDS": "Seed 004: a topic's half-life before it is accessed (1 day).",
    "MEMORY_TOPICS__MAX_HALF_LIFE_SECONDS": "Seed 004: the long-term half-life cap (30 days).",
    "MEMORY_TOPICS__ACCESS_THRESHOLD_FOR_LT": "Seed 004: the half-life doubles every this many accesses.",
    "MEMORY_TOPICS__MAX_MESSAGES_PER_TOPIC": "More active messages than this asks for a compaction.",
    "MEMORY_TOPICS__RECENT_MESSAGE_KEEP": "Newest messages a compaction leaves active.",
    "MEMORY_TOPICS__EVICTION_PRIORITY": "Topics whose priority falls below this are forgotten (archived).",
    "MEMORY_TOPICS__DEFAULT_IMPORTANCE": "Importance of a new topic.",
    "MEMORY_TOPICS__COMPACTION_TIMEOUT_S": "A compaction with no answer after this long is asked for again.",
    "MEMORY_TOPICS__COMPACTION_RETRY_S": "After a failed compaction, the topic waits this long before the next.",
    "MEMORY_TOPICS__EMBEDDING_MAX_ATTEMPTS": "Requests of one message's embedding before it joins the active topic"
                                             " unmatched.",
    "MEMORY_TOPICS__MAX_WAITING_CHARS": "Characters (text and vectors) held per conversation while messages wait"
                                        " for embeddings; beyond it messages are deferred.",
    "MEMORY_TOPICS__BACKLOG_BATCH": "Deferred messages read back from the projected log at a time.",
    "MEMORY_TOPICS__SUMMARY_PROMPT_VERSION": "Topic summary prompt (memory_agent/prompts/).",
    "MEMORY_TOPICS__RESTORE_MAX_MESSAGES": "Archived messages brought back at most when a topic is restored.",
    "MEMORY_RETRIEVAL__IMPORTANCE_SCALE": "Importance weight = importance / this (seed 001).",
    "MEMORY_RETRIEVAL__FRESH_DAYS": "Items younger than this keep a recency weight of 1.",
    "MEMORY_RETRIEVAL__STALE_DAYS": "Items older than this get stale_weight; in between the weight falls linearly.",
    "MEMORY_RETRIEVAL__QUERY_CHARS": "Characters of the current message that go into the query.",
    "MEMORY_RETRIEVAL__KEYWORD_MAX_TERMS": "Most words of a query searched by keyword.",
    "MEMORY_RETRIEVAL__MAX_CANDIDATE_K": "Cap on the hits per search a big token budget may ask for.",
    "MEMORY_FACTS__BATCH_SIZE": "Seed 003: the oldest this many unsummarized messages make one chunk.",
    "MEMORY_FACTS__FAILURE_BACKOFF_S": "Wait after a failed chunk request before the range is tried again.",
    "MEMORY_FACTS__EXTRACTION_MODEL": "Model of the extraction tier; None: llm.model.",
    "MEMORY_FACTS__PROMPT_VERSION": "Extraction prompt; None: llm.chunk_facts_prompt_version.",
    "MEMORY_FACTS__MAX_FACTS_PER_CHUNK": "Most facts kept from one chunk's extraction.",
    "MEMORY_CLIENT__TIMEOUT_S": "Longest the CLI and MCP server wait for an API answer.",
    "MEMORY_WORKER__METRICS_HOST": "Address the worker's metrics endpoint listens on (0.0.0.0 for a Prometheus in"
                                   " another container).",
    "MEMORY_PRIVACY__ENCRYPT_CONTENT": "Seal the free text of events with per-user data keys, so erasing a user"
                                       " makes the log's copies unreadable (docs/lineage.md).",
    "MEMORY_PRIVACY__MASTER_KEY_FILE": "JSON file {key id: base64 key} of master keys (merged with master_keys).",
    "MEMORY_PRIVACY__MASTER_KEY_ID": "The master key that wraps new data keys (default: the only one);"
                                     " the others still unwrap old keys (rotation, docs/deployment.md).",
}
