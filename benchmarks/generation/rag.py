"""RAG on Gemma 3 270M: accuracy and latency of standard RAG vs Speculative RAG vs Sparse RAG on the generated
multi-document QA set (services/generation/data/multidoc_qa.jsonl), and search latency + recall@10 of the pgvector
HNSW index vs the exact scan (kernels.topk_scores) on 100k vectors in an embedded PostgreSQL.

    python benchmarks/generation/rag.py [--n 30] [--k 10] [--drafts 5] [--clusters 2] [--cache .praxon/models]
        [--vectors 100000] [--queries 100] [--skip-qa] [--skip-index] [--threads 1]

QA: every question's documents go into one pool (216 documents for 48 questions); each question retrieves its top-k
documents from the whole pool with MiniLM (the exact path of the service's Search, in process); the three methods run
on the same retrieved passages with the same Gemma engine (Speculative RAG: Gemma as drafter and verifier). A
prediction is right when the gold answer appears in it (case-insensitive). Latency: seconds per question, retrieval
excluded. Index: 100k random unit vectors (384-d; --data gaussian: i.i.d., the hardest case for a graph index, or
clustered: 1,000 topics, closer to sentence embeddings), inserted with COPY and indexed (CREATE INDEX ... USING hnsw, pgvector's defaults m=16,
ef_construction=64); each query's exact top-10 is the reference for recall@10."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.generation import rag  # noqa: E402
from services.generation.documents import EMBED_DIM, embedder  # noqa: E402


def load(cache: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.generation import pretrained

    path = pretrained.hf_directory(cache)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def qa(args) -> None:
    from kernels.topk_scores import topk_scores
    from services.generation.engine import Engine

    rows = [json.loads(x) for x in open(ROOT / "services/generation/data/multidoc_qa.jsonl")]
    pool = [d for r in rows for d in r["documents"]]
    enc = embedder()
    t0 = time.perf_counter()
    table = torch.from_numpy(enc.embed([d["text"] for d in pool]))
    print(f"embedded {len(pool)} documents in {time.perf_counter() - t0:.1f}s")
    model, tok = load(args.cache)
    engine = Engine(model, tok, backend="reference", max_running=max(8, args.drafts), name="gemma").start()
    rng = np.random.default_rng(args.seed)
    chosen = sorted(rng.choice(len(rows), size=min(args.n, len(rows)), replace=False).tolist())
    res: dict[str, list[tuple[bool, float]]] = {"standard": [], "speculative": [], "sparse": []}
    extra = {"gold_recall": [], "sparse_kept": [], "draft_steps": [], "draft_tokens_sum": [], "draft_tokens_max": [],
             "spec_draft_s": []}
    for n, i in enumerate(chosen):
        r = rows[i]
        q = torch.from_numpy(enc.embed([r["question"]]))
        _, idx = topk_scores(q, table, args.k)
        hits = [pool[j] for j in idx[0].tolist()]
        embs = table[idx[0]].numpy()
        passages = [rag.Passage(h["id"], h["text"], h["title"], e) for h, e in zip(hits, embs, strict=True)]
        extra["gold_recall"].append(len(set(r["gold"]) & {h["id"] for h in hits}) / len(r["gold"]))
        gold = r["answer"].lower()
        out = {"standard": rag.standard_rag(engine, r["question"], passages, args.max_new_tokens),
               "speculative": rag.speculative_rag(engine, model, tok, r["question"], passages, m=args.drafts,
                                                  k=args.clusters, seed=args.seed, max_new_tokens=48),
               "sparse": rag.sparse_rag(engine, r["question"], passages, threshold=args.threshold,
                                        max_new_tokens=args.max_new_tokens)}
        for m, o in out.items():
            res[m].append((gold in o.answer.lower(), o.seconds))
        s = out["speculative"].info
        extra["sparse_kept"].append(len(out["sparse"].used))
        extra["draft_steps"].append(s["draft_steps"])
        extra["draft_tokens_sum"].append(sum(s["completion_tokens"]))
        extra["draft_tokens_max"].append(max(s["completion_tokens"]))
        extra["spec_draft_s"].append(s["draft_seconds"])
        print(f"[{n + 1}/{len(chosen)}] {r['kind']:7s} gold={r['answer']!r} " +
              " | ".join(f"{m}: {o.answer[:30]!r} {o.seconds:.1f}s" for m, o in out.items()), flush=True)
    engine.stop()
    base_acc = statistics.mean(c for c, _ in res["standard"])
    base_t = statistics.mean(t for _, t in res["standard"])
    print(f"\nmulti-document QA on Gemma 3 270M: {len(chosen)} questions, top-{args.k} of {len(pool)} documents, "
          f"gold-document recall@{args.k} {statistics.mean(extra['gold_recall']):.3f}")
    print(f"{'method':<12} {'accuracy':>9} {'vs std (pts)':>13} {'latency s':>10} {'vs std':>8}")
    for m, v in res.items():
        acc = statistics.mean(c for c, _ in v)
        lat = statistics.mean(t for _, t in v)
        print(f"{m:<12} {acc:>9.3f} {100 * (acc - base_acc):>+13.1f} {lat:>10.2f} {lat / base_t:>7.2f}x")
    for kind in ("single", "two_hop"):
        sel = [j for j, i in enumerate(chosen) if rows[i]["kind"] == kind]
        if sel:
            print(f"  {kind:8s} ({len(sel)}): " + ", ".join(
                f"{m} {statistics.mean(res[m][j][0] for j in sel):.3f}" for m in res))
    print(f"speculative drafts: {args.drafts} per question, engine decode steps {statistics.mean(extra['draft_steps']):.1f}"
          f" vs tokens summed over drafts {statistics.mean(extra['draft_tokens_sum']):.1f} (longest draft "
          f"{statistics.mean(extra['draft_tokens_max']):.1f}); drafting {statistics.mean(extra['spec_draft_s']):.2f}s")
    print(f"sparse: passages kept {statistics.mean(extra['sparse_kept']):.2f} of {args.k}")


def index(args) -> None:
    import psycopg
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from services.common import db
    from services.common.embedded import EmbeddedPostgres
    from services.common.settings import Settings
    from services.generation.documents import HNSW_SQL, DocumentStore, _vec_text, to_bytes

    tmp = Path(tempfile.mkdtemp(prefix="praxon-ragbench-", dir=ROOT / ".praxon" if (ROOT / ".praxon").is_dir()
                                else None))
    pg = EmbeddedPostgres(tmp).start()
    try:
        with psycopg.connect(pg.url("postgres"), autocommit=True) as c:
            c.execute("CREATE DATABASE praxon")
        s = Settings(database_url=pg.url())
        db.migrate(s)
        rng = np.random.default_rng(args.seed)
        N = args.vectors
        vecs = rng.normal(size=(N, EMBED_DIM)).astype(np.float32)
        if args.data == "clustered":  # N / 100 topics, a point = its topic's centre + noise (cosine ~0.7 to it)
            centres = rng.normal(size=(max(1, N // 100), EMBED_DIM)).astype(np.float32)
            centres /= np.linalg.norm(centres, axis=1, keepdims=True)
            vecs = centres[rng.integers(0, len(centres), size=N)] + vecs / EMBED_DIM ** 0.5
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        print(f"vectors: {args.data}")
        with db.connect(s) as conn:
            tenant = str(conn.execute("INSERT INTO tenants (name) VALUES ('bench') RETURNING id").fetchone()["id"])
            col = str(conn.execute("INSERT INTO rag_collections (tenant_id, name) VALUES (%s, 'bench') RETURNING id",
                                   (tenant,)).fetchone()["id"])
            conn.execute("DROP INDEX rag_chunks_hnsw")
            t0 = time.perf_counter()
            doc_ids = [str(r["id"]) for r in conn.execute(
                "INSERT INTO rag_documents (collection_id, tenant_id, external_id, text, status) "
                "SELECT %s, %s, 'e' || g, '', 'indexed' FROM generate_series(0, %s) g RETURNING id",
                (col, tenant, N - 1)).fetchall()]
            with conn.cursor().copy("COPY rag_chunks (document_id, collection_id, tenant_id, chunk_index, text, "
                                    "embedding, embedding_v) FROM STDIN") as cp:
                for i in range(N):
                    cp.write_row((doc_ids[i], col, tenant, 0, "", to_bytes(vecs[i]), _vec_text(vecs[i])))
            conn.commit()
            t_load = time.perf_counter() - t0
            conn.execute("SET maintenance_work_mem = '1GB'")
            t0 = time.perf_counter()
            conn.execute("CREATE INDEX rag_chunks_hnsw ON rag_chunks USING hnsw (embedding_v vector_cosine_ops)")
            conn.commit()
            t_build = time.perf_counter() - t0
        print(f"\n{N} vectors loaded in {t_load:.1f}s; HNSW index built in {t_build:.1f}s")
        with db.connect(s) as conn:
            conn.execute("ANALYZE rag_chunks")
            conn.commit()
            plan = conn.execute("EXPLAIN " + HNSW_SQL.replace("%s::vector", f"'{_vec_text(vecs[0])}'::vector", 1),
                                (col, tenant, 10)).fetchall()
        uses = any("rag_chunks_hnsw" in r["QUERY PLAN"] for r in plan)
        print(f"the search plan {'uses' if uses else 'does NOT use'} the HNSW index")
        pool = ConnectionPool(pg.url(), kwargs={"row_factory": dict_row}, min_size=1, max_size=2, open=True)
        queries = rng.normal(size=(args.queries, EMBED_DIM)).astype(np.float32)
        # queries near stored vectors (a perturbed copy), as a real query is near its documents
        base = vecs[rng.choice(N, size=args.queries, replace=False)]
        queries = base + 0.5 / EMBED_DIM ** 0.5 * queries
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        rows = []
        for ef in args.ef_search:
            store = DocumentStore(pool, ef_search=ef)
            t0 = time.perf_counter()
            store.search(tenant, col, queries[0], 10, index="exact")  # the table is read and cached once
            t_first = time.perf_counter() - t0
            lat = {"exact": [], "hnsw": []}
            recall = []
            for q in queries:
                t0 = time.perf_counter()
                e, _ = store.search(tenant, col, q, 10, index="exact")
                lat["exact"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                h, _ = store.search(tenant, col, q, 10, index="hnsw")
                lat["hnsw"].append(time.perf_counter() - t0)
                recall.append(len({x.external_id for x in e} & {x.external_id for x in h}) / 10)
            rows.append((ef, statistics.median(lat["exact"]), statistics.median(lat["hnsw"]),
                         statistics.mean(recall), t_first))
        pool.close()
        print(f"search over {N} vectors, {args.queries} queries, top-10 (median latency per query, through the store)")
        print(f"{'ef_search':>9} {'exact ms':>9} {'hnsw ms':>8} {'speed-up':>9} {'recall@10':>10} {'exact 1st load s':>17}")
        for ef, le, lh, rc, tf in rows:
            print(f"{ef:>9} {1000 * le:>9.1f} {1000 * lh:>8.1f} {le / lh:>8.1f}x {rc:>10.3f} {tf:>17.1f}")
    finally:
        pg.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--drafts", type=int, default=5)
    ap.add_argument("--clusters", type=int, default=2)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=".praxon/models")
    ap.add_argument("--vectors", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ef-search", type=int, nargs="+", default=[40, 100, 200])
    ap.add_argument("--data", choices=["gaussian", "clustered"], default="gaussian",
                    help="gaussian: i.i.d. unit vectors; clustered: N/100 topics (closer to sentence embeddings)")
    ap.add_argument("--skip-qa", action="store_true")
    ap.add_argument("--skip-index", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.skip_qa:
        qa(args)
    if not args.skip_index:
        index(args)


if __name__ == "__main__":
    main()
