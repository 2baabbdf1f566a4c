"""RetrievalService end to end: the real gRPC server and interceptors, a `praxon worker` subprocess running the
indexing job (progress events), PostgreSQL, S3; a tiny Llama from the registry answers. Search, deletion (no later
search or answer returns the document), tenant scoping (another tenant's collection is NOT_FOUND), bad input naming
its field; and the pgvector HNSW path against an embedded PostgreSQL (the machine's PostgreSQL 15 has no pgvector)."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import grpc
import numpy as np
import pytest

from praxon.common.v1 import common_pb2
from praxon.generation.v1 import retrieval_pb2 as pb
from praxon.generation.v1 import retrieval_pb2_grpc
from tests import harness
from tests.generation.conftest import tiny_llama
from tests.harness import auth, job_row, rpc_error_details, wait_for

FACTS = [("mira", "The Orlan Tower stands in the town of Vesk and was built in 1912."),
         ("pell", "Vesk is a harbour town on the northern coast of Tallandia."),
         ("quorn", "The river Amsel feeds the lake Dorrow, famous for its silver trout."),
         ("sable", "Chef Ilda Roon opened the restaurant Blue Kettle in 1987."),
         ("tarn", "The Blue Kettle restaurant serves smoked eel and rye bread."),
         ("umber", "Mount Kessa is the highest peak of the Darven range, 3120 metres high.")]


@pytest.fixture(scope="module")
def settings(settings):
    with harness.private_platform(settings) as private:
        yield private


@pytest.fixture(scope="module")
def env(settings, tmp_path_factory, tokenizer):
    from services.common import hf

    tenant, token = harness.token_for(settings, f"rag-{uuid.uuid4().hex[:6]}")
    other_tenant, other = harness.token_for(settings, f"rag-other-{uuid.uuid4().hex[:6]}")
    tensors, config = hf.from_pretrained_objects(tiny_llama(tokenizer, seed=8, context=1024), tokenizer)
    harness.register_model(settings, tenant, "lm", tensors, kind=hf.REGISTRY_KIND, config=config)
    server = harness.PlatformServer(settings, ["platform", "generation"])
    log_dir = tmp_path_factory.mktemp("rag-workers")
    worker = harness.Worker(settings, log_dir, "default")
    channel = grpc.insecure_channel(server.address)
    e = SimpleNamespace(server=server, worker=worker, stub=retrieval_pb2_grpc.RetrievalServiceStub(channel),
                        md=auth(token), other=auth(other), tenant=tenant, settings=settings, token=token,
                        log_dir=log_dir)
    yield e
    e.worker.stop()
    channel.close()
    server.stop()


def _index(env, collection: str, docs, md=None):
    job = env.stub.StartIndexingJob(pb.StartIndexingJobRequest(
        collection=collection, documents=[pb.DocumentInput(external_id=i, title=i, text=t) for i, t in docs]),
        metadata=md or env.md).job
    row = wait_for(lambda: (r := job_row(env.settings, job.id))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
                   and r, 240, interval=0.2, what=f"job {job.id}")
    assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
    return job.id, row


@pytest.fixture(scope="module")
def facts(env):
    env.stub.CreateCollection(pb.CreateCollectionRequest(name="facts"), metadata=env.md)
    job_id, row = _index(env, "facts", FACTS)
    return job_id, row


def test_the_indexing_job_runs_on_a_worker_with_progress(env, facts):
    from services.common import db

    job_id, row = facts
    assert row["result"]["documents"] == len(FACTS) and row["result"]["chunks"] == len(FACTS)
    with db.connect(env.settings) as conn:
        events = conn.execute("SELECT progress, message FROM job_events WHERE job_id = %s ORDER BY seq",
                              (job_id,)).fetchall()
    steps = [e for e in events if e["message"].startswith("document ")]
    assert len(steps) == len(FACTS)
    assert [e["progress"] for e in steps] == sorted(e["progress"] for e in steps)
    cols = env.stub.ListCollections(pb.ListCollectionsRequest(), metadata=env.md).collections
    assert [(c.name, c.document_count, c.chunk_count, c.index) for c in cols] == [("facts", 6, 6, "exact")]
    doc = env.stub.GetDocument(pb.GetDocumentRequest(collection="facts", external_id="pell"), metadata=env.md).document
    assert doc.status == "indexed" and doc.chunk_count == 1 and doc.text == FACTS[1][1]


def test_search_ranks_the_matching_document_first(env, facts):
    r = env.stub.Search(pb.SearchRequest(collection="facts", query="Which peak is the highest in the Darven range?",
                                         k=3), metadata=env.md)
    assert r.index == "exact" and len(r.hits) == 3
    assert r.hits[0].external_id == "umber"
    assert [h.score for h in r.hits] == sorted((h.score for h in r.hits), reverse=True)


def _answer(env, method, collection="facts", **kw):
    return env.stub.AnswerWithRetrieval(pb.AnswerWithRetrievalRequest(
        question=kw.pop("question", "Who opened the Blue Kettle restaurant?"), collection=collection, method=method,
        model=common_pb2.ModelRef(name="lm"), **kw), metadata=env.md, timeout=120)


def test_answers_three_ways_say_which_documents_they_used(env, facts):
    std = _answer(env, pb.RAG_METHOD_STANDARD, k=4, max_new_tokens=4)
    assert len(std.documents_retrieved) == 4 and list(std.documents_used) == list(std.documents_retrieved)
    assert std.documents_retrieved[0] in ("sable", "tarn")
    spec = _answer(env, pb.RAG_METHOD_SPECULATIVE, k=4, drafts=3, clusters=2, max_new_tokens=4)
    assert len(spec.drafts) == 3 and spec.answer == spec.drafts[0].answer
    assert list(spec.documents_used) == list(spec.drafts[0].external_ids) and len(spec.documents_used) == 2
    for d in spec.drafts:
        assert d.log_score == pytest.approx(d.log_draft + d.log_self_consistency + d.log_self_reflection, abs=1e-9)
    sparse = _answer(env, pb.RAG_METHOD_SPARSE, k=4, relevance_threshold=1.0, max_new_tokens=4)
    assert len(sparse.ratings) == 4 and list(sparse.documents_used) == [r.external_id for r in sparse.ratings
                                                                        if r.kept]
    assert len(sparse.documents_used) == 1


def test_a_deleted_document_is_never_returned_again(env):
    env.stub.CreateCollection(pb.CreateCollectionRequest(name="deleting"), metadata=env.md)
    _index(env, "deleting", FACTS[:4])
    q = "Where does the Orlan Tower stand?"
    assert env.stub.Search(pb.SearchRequest(collection="deleting", query=q, k=1), metadata=env.md
                           ).hits[0].external_id == "mira"
    gone = env.stub.DeleteDocument(pb.DeleteDocumentRequest(collection="deleting", external_id="mira"),
                                   metadata=env.md)
    assert gone.chunks_removed == 1
    hits = env.stub.Search(pb.SearchRequest(collection="deleting", query=q, k=10), metadata=env.md).hits
    assert len(hits) == 3 and "mira" not in {h.external_id for h in hits}
    for method in (pb.RAG_METHOD_STANDARD, pb.RAG_METHOD_SPARSE, pb.RAG_METHOD_SPECULATIVE):
        r = _answer(env, method, collection="deleting", question=q, k=10, drafts=2, max_new_tokens=2)
        assert "mira" not in set(r.documents_retrieved) | set(r.documents_used)
        assert all("mira" not in d.external_ids for d in r.drafts)
    _bad(env, env.stub.GetDocument, pb.GetDocumentRequest(collection="deleting", external_id="mira"), "external_id",
         grpc.StatusCode.NOT_FOUND)


def _bad(env, method, req, field, code=grpc.StatusCode.INVALID_ARGUMENT, md=None):
    with pytest.raises(grpc.RpcError) as err:
        method(req, metadata=md or env.md, timeout=60)
    c, info, bad, _ = rpc_error_details(err.value)
    assert c == code, (field, err.value.details())
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        assert bad is not None and bad.field_violations[0].field == field, (field, bad)
    else:
        # a collection or document names its field; an unknown model names itself under its field's key
        assert info is not None and field in (info.metadata.get("field"), *info.metadata), (field, info)


def test_another_tenants_collection_is_not_found(env, facts):
    _bad(env, env.stub.Search, pb.SearchRequest(collection="facts", query="tower"), "collection",
         grpc.StatusCode.NOT_FOUND, md=env.other)
    col = next(c for c in env.stub.ListCollections(pb.ListCollectionsRequest(), metadata=env.md).collections
               if c.name == "facts")
    for ref in ("facts", col.id):
        _bad(env, env.stub.AnswerWithRetrieval, pb.AnswerWithRetrievalRequest(question="q", collection=ref),
             "collection", grpc.StatusCode.NOT_FOUND, md=env.other)
        _bad(env, env.stub.DeleteDocument, pb.DeleteDocumentRequest(collection=ref, external_id="pell"),
             "collection", grpc.StatusCode.NOT_FOUND, md=env.other)
        _bad(env, env.stub.StartIndexingJob, pb.StartIndexingJobRequest(
            collection=ref, documents=[pb.DocumentInput(external_id="x", text="y")]), "collection",
            grpc.StatusCode.NOT_FOUND, md=env.other)
    assert env.stub.ListCollections(pb.ListCollectionsRequest(), metadata=env.other).collections == []
    assert env.stub.GetDocument(pb.GetDocumentRequest(collection="facts", external_id="pell"),
                                metadata=env.md).document.external_id == "pell"  # still there for its owner


def test_bad_input_names_the_field(env, facts):
    s = env.stub
    A = pb.AnswerWithRetrievalRequest
    _bad(env, s.AnswerWithRetrieval, A(question="", collection="facts"), "question")
    _bad(env, s.AnswerWithRetrieval, A(question="   ", collection="facts"), "question")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="facts", k=0), "k")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="facts", k=51), "k")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="facts", drafts=0), "drafts")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="facts", relevance_threshold=1.5),
         "relevance_threshold")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="facts", method=99), "method")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection=""), "collection")
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="nope"), "collection", grpc.StatusCode.NOT_FOUND)
    _bad(env, s.AnswerWithRetrieval, A(question="q", collection="facts", model=common_pb2.ModelRef(name="absent")),
         "model", grpc.StatusCode.NOT_FOUND)
    _bad(env, s.Search, pb.SearchRequest(collection="facts", query=""), "query")
    _bad(env, s.Search, pb.SearchRequest(collection="facts", query="q", k=101), "k")
    _bad(env, s.Search, pb.SearchRequest(collection="nope", query="q"), "collection", grpc.StatusCode.NOT_FOUND)
    _bad(env, s.CreateCollection, pb.CreateCollectionRequest(name="bad name!"), "name")
    Ix, D = pb.StartIndexingJobRequest, pb.DocumentInput
    _bad(env, s.StartIndexingJob, Ix(collection="facts"), "documents")
    _bad(env, s.StartIndexingJob, Ix(collection="facts", documents=[D(external_id="a", text="")]), "documents[0].text")
    _bad(env, s.StartIndexingJob, Ix(collection="facts", documents=[D(external_id="a", text="t"),
                                                                   D(external_id="a", text="u")]),
         "documents[1].external_id")
    _bad(env, s.StartIndexingJob, Ix(collection="facts", documents=[D(external_id="a", text="t")], chunk_chars=10),
         "chunk_chars")


def test_a_killed_indexing_job_resumes_and_indexes_every_document_once(env):
    from services.common import db

    env.stub.CreateCollection(pb.CreateCollectionRequest(name="killed"), metadata=env.md)
    words = "harbour bridge market tower river lake mountain valley forest meadow".split()
    docs = [pb.DocumentInput(external_id=f"k{i:03d}", text=" ".join(words[(i + j) % 10] + f" {i}-{j}."
                                                                     for j in range(20))) for i in range(80)]
    job = env.stub.StartIndexingJob(pb.StartIndexingJobRequest(collection="killed", documents=docs, chunk_chars=120,
                                                               overlap_chars=0), metadata=env.md).job
    wait_for(lambda: job_row(env.settings, job.id)["progress"] >= 0.2, 180, interval=0.05, what="documents")
    env.worker.kill9()
    killed_at = job_row(env.settings, job.id)["progress"]
    env.worker = harness.Worker(env.settings, env.log_dir, "default")
    row = wait_for(lambda: (r := job_row(env.settings, job.id))["state"] in ("SUCCEEDED", "FAILED") and r, 240,
                   interval=0.2, what="the resumed job")
    assert row["state"] == "SUCCEEDED" and row["attempts"] == 2 and killed_at < 1.0
    with db.connect(env.settings) as conn:
        steps = [r["message"] for r in conn.execute(
            "SELECT message FROM job_events WHERE job_id = %s ORDER BY seq", (job.id,)) if
            r["message"].startswith("document ")]
        n = conn.execute("SELECT count(*) AS n, count(DISTINCT document_id) AS d FROM rag_chunks k JOIN "
                         "rag_collections c ON c.id = k.collection_id WHERE c.name = 'killed' AND c.tenant_id = %s",
                         (env.tenant,)).fetchone()
    assert steps[-1] == "document 80/80" and len(steps) < 2 * 80  # the second attempt went on from its checkpoint
    assert n["d"] == 80 and row["result"]["documents"] == 80 and row["result"]["chunks"] == n["n"]


def test_cli_indexes_searches_and_asks(env, tmp_path, capsys):
    import argparse
    import json

    from services.common.client import resolve_target
    from services.generation import cli

    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"id": i, "title": i, "text": t}) + "\n" for i, t in FACTS))
    opts = dict(address=env.server.address, token=env.token, data_dir=str(tmp_path))
    cli.cmd_rag_index(argparse.Namespace(collection="cli", files=[str(f)], **opts))
    cli.cmd_rag_search(argparse.Namespace(collection="cli", query="the highest peak of the Darven range", k=2,
                                          **opts))
    out = capsys.readouterr().out
    assert "indexed 6 documents (6 chunks) into 'cli'" in out
    assert out.strip().splitlines()[-2].split()[1] == "umber#0"
    r = cli.rag_ask(resolve_target(env.server.address, env.token, str(tmp_path)), "cli", "Who opened Blue Kettle?",
                    "speculative", k=3, model=common_pb2.ModelRef(name="lm"), drafts=2, clusters=2)
    cli.print_answer(r)
    out = capsys.readouterr().out
    assert out.count("draft [") == 2 and "documents used: " in out


def test_hnsw_in_an_embedded_postgresql_agrees_with_the_exact_scan(tmp_path_factory):
    """pgvector path: the migrations create the vector column and HNSW index in a server that has the extension;
    on 300 clustered unit vectors the HNSW top-10 overlaps the exact top-10 almost entirely, and a deleted document
    leaves both."""
    from psycopg_pool import ConnectionPool

    from services.common import db
    from services.common.embedded import EmbeddedPostgres
    from services.common.settings import Settings
    from services.generation import documents as D

    pg = EmbeddedPostgres(tmp_path_factory.mktemp("pgvec")).start()
    try:
        import psycopg

        with psycopg.connect(pg.url("postgres"), autocommit=True) as c:
            c.execute("CREATE DATABASE praxon")
        s = Settings(database_url=pg.url())
        db.migrate(s)
        with db.connect(s) as conn:
            assert D.has_vector(conn)
            tenant = conn.execute("INSERT INTO tenants (name) VALUES ('t') RETURNING id").fetchone()["id"]
            conn.commit()
        pool = ConnectionPool(pg.url(), kwargs={"row_factory": __import__("psycopg.rows").rows.dict_row},
                              min_size=1, max_size=2, open=True)
        store = D.DocumentStore(pool)
        assert store.hnsw()
        col = store.create_collection(str(tenant), "vec")
        rng = np.random.default_rng(0)
        # 30 topics of 10 vectors (as sentence embeddings cluster): a query's exact top-10 is clearly separated
        centres = rng.normal(size=(30, D.EMBED_DIM)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        vecs = np.repeat(centres, 10, axis=0) + rng.normal(size=(300, D.EMBED_DIM)).astype(np.float32) / 384 ** 0.5
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)

        class Fixed:  # the embedder: document i's text is its index
            def embed(self, texts):
                return vecs[[int(t) for t in texts]]
        ids = store.put_documents(str(tenant), str(col["id"]), [{"external_id": f"e{i}", "text": str(i)}
                                                                for i in range(300)])
        with db.connect(s) as conn:
            D.index_documents(conn, str(tenant), str(col["id"]), ids, chunk_chars=800, overlap_chars=0, enc=Fixed())
            conn.commit()
        overlap = []
        for qi in range(5):
            q = vecs[qi * 7] + 0.3 / D.EMBED_DIM ** 0.5 * rng.normal(size=D.EMBED_DIM).astype(np.float32)
            q /= np.linalg.norm(q)
            h, used = store.search(str(tenant), str(col["id"]), q, 10)
            e, used_e = store.search(str(tenant), str(col["id"]), q, 10, index="exact")
            assert (used, used_e) == ("hnsw", "exact")
            assert h[0].external_id == e[0].external_id == f"e{qi * 7}"
            assert h[0].score == pytest.approx(e[0].score, abs=1e-4)
            overlap.append(len({x.external_id for x in h} & {x.external_id for x in e}) / 10)
        assert np.mean(overlap) >= 0.8
        store.delete_document(str(tenant), str(col["id"]), "e0")
        for index in ("hnsw", "exact"):
            got, _ = store.search(str(tenant), str(col["id"]), vecs[0], 10, index=index)
            assert "e0" not in {x.external_id for x in got}
        pool.close()
    finally:
        pg.stop()
