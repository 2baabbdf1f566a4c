"""RetrievalService: proto <-> domain for the document index (services.generation.documents) and the RAG methods
(services.generation.rag). Models come from the GenerationService's model cache (the same engines serve Generate and
the RAG answers); a model served by a remote backend cannot be used here (its tokens, logprobs and caches are not
this service's)."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc

from praxon.generation.v1 import retrieval_pb2 as pb
from praxon.generation.v1 import retrieval_pb2_grpc
from services.common import convert
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.params import parse_params
from services.common.server import AppContext, current_tenant
from services.generation.documents import DocumentStore, embedder
from services.generation.params import AnswerParams, IndexParams, SearchParams

INDEX_KIND = "generation.index"
METHODS = {pb.RAG_METHOD_UNSPECIFIED: "standard", pb.RAG_METHOD_STANDARD: "standard",
           pb.RAG_METHOD_SPECULATIVE: "speculative", pb.RAG_METHOD_SPARSE: "sparse"}
METHOD_ENUM = {"standard": pb.RAG_METHOD_STANDARD, "speculative": pb.RAG_METHOD_SPECULATIVE,
               "sparse": pb.RAG_METHOD_SPARSE}
MAX_DOCUMENTS = 10_000
MAX_TEXT = 200_000


def collection_message(row: dict, index: str) -> pb.Collection:
    return pb.Collection(id=str(row["id"]), name=row["name"], document_count=int(row["documents"]),
                         chunk_count=int(row["chunks"]), index=index)


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, app: AppContext, generation: Any):
        self.app = app
        self.generation = generation  # the GenerationServicer: its model cache
        self.store = DocumentStore(app.pool)

    def _index_name(self) -> str:
        return "hnsw" if self.store.hnsw() else "exact"

    async def CreateCollection(self, request, context):
        tenant = current_tenant()
        row = await asyncio.to_thread(self.store.create_collection, tenant, request.name)
        return pb.CreateCollectionResponse(collection=collection_message(row, await asyncio.to_thread(
            self._index_name)))

    async def ListCollections(self, request, context):
        tenant = current_tenant()
        rows = await asyncio.to_thread(self.store.list_collections, tenant)
        index = await asyncio.to_thread(self._index_name)
        return pb.ListCollectionsResponse(collections=[collection_message(r, index) for r in rows])

    async def StartIndexingJob(self, request, context):
        tenant = current_tenant()
        if not request.documents:
            raise InvalidArgument("documents", "give at least one document")
        if len(request.documents) > MAX_DOCUMENTS:
            raise InvalidArgument("documents", f"at most {MAX_DOCUMENTS} documents a job")
        seen: set[str] = set()
        docs = []
        for i, d in enumerate(request.documents):
            f = f"documents[{i}]."
            if not d.external_id or len(d.external_id) > 256:
                raise InvalidArgument(f + "external_id", "1..256 characters")
            if d.external_id in seen:
                raise InvalidArgument(f + "external_id", f"{d.external_id!r} appears twice")
            seen.add(d.external_id)
            if not d.text.strip():
                raise InvalidArgument(f + "text", "must not be empty")
            if len(d.text) > MAX_TEXT:
                raise InvalidArgument(f + "text", f"at most {MAX_TEXT} characters")
            if len(d.title) > 1000:
                raise InvalidArgument(f + "title", "at most 1000 characters")
            docs.append({"external_id": d.external_id, "title": d.title, "text": d.text})
        params: dict[str, Any] = {"collection_id": "", "documents": len(docs)}
        if request.HasField("chunk_chars"):
            params["chunk_chars"] = request.chunk_chars
        if request.HasField("overlap_chars"):
            params["overlap_chars"] = request.overlap_chars
        parse_params(IndexParams, {**params, "collection_id": "x"},
                     field_paths={"chunk_chars": "chunk_chars", "overlap_chars": "overlap_chars"})

        def work():
            col = self.store.collection(tenant, request.collection)
            params["collection_id"] = str(col["id"])

            def store_documents(conn, job_row):
                for d in docs:
                    row = conn.execute(
                        "INSERT INTO rag_documents (collection_id, tenant_id, external_id, title, text, status, "
                        "job_id) VALUES (%s, %s, %s, %s, %s, 'pending', %s) ON CONFLICT (collection_id, external_id) "
                        "DO UPDATE SET title = excluded.title, text = excluded.text, status = 'pending', "
                        "job_id = excluded.job_id, updated_at = now() RETURNING id",
                        (col["id"], tenant, d["external_id"], d["title"], d["text"], job_row["id"])).fetchone()
                    conn.execute("DELETE FROM rag_chunks WHERE document_id = %s", (row["id"],))
                conn.execute("UPDATE rag_collections SET revision = revision + 1 WHERE id = %s", (col["id"],))
            return self.app.jobs.submit(tenant, INDEX_KIND, params, request.idempotency_key,
                                        in_transaction=store_documents)
        return pb.StartIndexingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def GetDocument(self, request, context):
        tenant = current_tenant()

        def work():
            col = self.store.collection(tenant, request.collection)
            return self.store.get_document(tenant, str(col["id"]), request.external_id)
        r = await asyncio.to_thread(work)
        return pb.GetDocumentResponse(document=pb.Document(external_id=r["external_id"], title=r["title"],
                                                           text=r["text"], status=r["status"],
                                                           chunk_count=int(r["chunks"])))

    async def DeleteDocument(self, request, context):
        tenant = current_tenant()

        def work():
            col = self.store.collection(tenant, request.collection)
            return self.store.delete_document(tenant, str(col["id"]), request.external_id)
        return pb.DeleteDocumentResponse(chunks_removed=await asyncio.to_thread(work))

    def _search(self, tenant: str, collection: str, query: str, k: int):
        col = self.store.collection(tenant, collection)
        vec = embedder().embed([query])[0]
        hits, index = self.store.search(tenant, str(col["id"]), vec, k)
        return hits, index

    async def Search(self, request, context):
        tenant = current_tenant()
        raw: dict[str, Any] = {"query": request.query}
        if request.HasField("k"):
            raw["k"] = request.k
        p = parse_params(SearchParams, raw, field_paths={"query": "query", "k": "k"})
        if not request.collection:
            raise InvalidArgument("collection", "name a collection")
        hits, index = await asyncio.to_thread(self._search, tenant, request.collection, p.query, p.k)
        return pb.SearchResponse(hits=[pb.SearchHit(external_id=h.external_id, title=h.title,
                                                    chunk_index=h.chunk_index, text=h.text, score=h.score)
                                       for h in hits], index=index)

    async def _engine(self, ref, field: str):
        loaded = await self.generation._model(ref)
        if loaded.tokenizer is None:
            raise FailedPrecondition(f"{loaded.info.name!r} is served by a remote backend: RAG needs a model this "
                                     "service runs (its logprobs and KV caches)", reason="UNSUPPORTED_BY_BACKEND",
                                     metadata={"field": field})
        return loaded.engine

    async def AnswerWithRetrieval(self, request, context):
        from services.generation import rag

        tenant = current_tenant()
        raw: dict[str, Any] = {"question": request.question,
                               "method": convert.enum_of(METHODS, request.method, "method")}
        for f in ("k", "drafts", "clusters", "relevance_threshold", "max_new_tokens", "seed"):
            if request.HasField(f):
                raw[f] = getattr(request, f)
        p = parse_params(AnswerParams, raw, field_paths={f: f for f in AnswerParams.model_fields})
        if not request.collection:
            raise InvalidArgument("collection", "name a collection")
        col = await asyncio.to_thread(self.store.collection, tenant, request.collection)
        engine = await self._engine(request.model, "model")
        verifier = await self._engine(request.verifier, "verifier") if p.method == "speculative" and (
            request.HasField("verifier")) else engine

        def work():
            vec = embedder().embed([request.question])[0]
            # chunks best first, at most one passage per document (its best chunk), the top k documents
            hits, _ = self.store.search(tenant, str(col["id"]), vec, min(4 * p.k, 200))
            chosen, seen = [], set()
            for h in hits:
                if h.external_id not in seen:
                    seen.add(h.external_id)
                    chosen.append(h)
                if len(chosen) == p.k:
                    break
            if not chosen:
                raise FailedPrecondition(f"collection {request.collection!r} has no indexed documents",
                                         reason="COLLECTION_EMPTY", metadata={"field": "collection"})
            embs = embedder().embed([h.text for h in chosen]) if p.method == "speculative" else [None] * len(chosen)
            passages = [rag.Passage(h.external_id, h.text, h.title, e) for h, e in zip(chosen, embs, strict=True)]
            if p.method == "standard":
                res = rag.standard_rag(engine, p.question, passages, p.max_new_tokens)
            elif p.method == "sparse":
                res = rag.sparse_rag(engine, p.question, passages, threshold=p.relevance_threshold,
                                     max_new_tokens=p.max_new_tokens)
            else:
                res = rag.speculative_rag(engine, verifier.model, verifier.tokenizer, p.question, passages,
                                          m=p.drafts, k=p.clusters, seed=p.seed,
                                          max_new_tokens=max(p.max_new_tokens, 48))
            return res, [h.external_id for h in chosen]
        res, retrieved = await asyncio.to_thread(work)
        return pb.AnswerWithRetrievalResponse(
            answer=res.answer, documents_used=res.used, documents_retrieved=retrieved, method=METHOD_ENUM[p.method],
            seconds=res.seconds,
            drafts=[pb.Draft(external_ids=d.doc_ids, answer=d.answer, rationale=d.rationale, log_draft=d.log_draft,
                             log_self_consistency=d.log_sc, log_self_reflection=d.log_sr, log_score=d.log_score)
                    for d in res.drafts],
            ratings=[pb.DocumentRating(external_id=r.doc_id, relevance=r.relevance, kept=r.kept)
                     for r in res.ratings])


def register(server: grpc.aio.Server, app: AppContext, generation: Any) -> str:
    servicer = RetrievalServicer(app, generation)
    app.extras["retrieval_servicer"] = servicer
    retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(servicer, server)
    return pb.DESCRIPTOR.services_by_name["RetrievalService"].full_name
