-- Generation (issue 33): a tenant's document collections for retrieval-augmented generation. Documents are stored by
-- StartIndexingJob (status 'pending') and chunked and embedded (MiniLM, 384 float32, L2-normalised) by the
-- generation.index job. Search scans the chunks of one collection exactly (kernels.topk_scores) or, where the server
-- has the pgvector extension, through an HNSW index on the vector column below.

-- A collection of one tenant; revision grows at every change of its chunks (the exact-scan cache keys on it).
CREATE TABLE rag_collections (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    name        text NOT NULL,
    revision    bigint NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- A document; external_id is the caller's id (indexing it again replaces text and chunks).
CREATE TABLE rag_documents (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    collection_id  uuid NOT NULL REFERENCES rag_collections(id) ON DELETE CASCADE,
    tenant_id      uuid NOT NULL REFERENCES tenants(id),
    external_id    text NOT NULL,
    title          text NOT NULL DEFAULT '',
    text           text NOT NULL,
    status         text NOT NULL CHECK (status IN ('pending', 'indexed')),
    job_id         uuid,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (collection_id, external_id)
);

-- A chunk with its embedding (float32 little-endian bytes, 384 of them).
CREATE TABLE rag_chunks (
    id             bigserial PRIMARY KEY,
    document_id    uuid NOT NULL REFERENCES rag_documents(id) ON DELETE CASCADE,
    collection_id  uuid NOT NULL,
    tenant_id      uuid NOT NULL,
    chunk_index    integer NOT NULL,
    text           text NOT NULL,
    embedding      bytea NOT NULL,
    UNIQUE (document_id, chunk_index)
);
CREATE INDEX rag_chunks_collection ON rag_chunks (collection_id);

-- pgvector where the server ships it (the embedded PostgreSQL does; a plain PostgreSQL 15 may not): a vector column
-- and an HNSW index for cosine distance. Without the extension nothing more is created and search scans exactly
-- (services.generation.documents.ensure_vector repeats this at startup, for an extension installed later).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        CREATE EXTENSION IF NOT EXISTS vector;
        ALTER TABLE rag_chunks ADD COLUMN IF NOT EXISTS embedding_v vector(384);
        CREATE INDEX IF NOT EXISTS rag_chunks_hnsw ON rag_chunks USING hnsw (embedding_v vector_cosine_ops);
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pgvector is available but this role may not create it: search scans exactly';
END
$$;
