-- Run once by the pgvector image on a fresh data volume (docker-compose.yml mounts it).
-- The image ships pgvector; the extension still has to be created in the database.
CREATE EXTENSION IF NOT EXISTS vector;
