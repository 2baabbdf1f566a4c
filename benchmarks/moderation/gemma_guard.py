"""The Gemma guard (gemma_guard.py, kind "gemma_frozen") beside the MiniLM guard (frozen_linear) on the held-out
rows of the real-request pairs (services/moderation/data/gemma_pairs.jsonl, split by source request and template
group), plus the data statistics and the serving cost of both.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/moderation/gemma_guard.py [--cache /tmp/gemma/cache]
        [--layers 4,6,9,12,15,18] [--latency-texts 32] [--no-latency]

Per guard: heads fitted on the "train" rows (Newton to the minimum of guard.frozen_linear_objective), decision
defaults chosen on the "validation" rows (decision.choose_defaults: most recall of severity >= 2 at <= 5% benign
false blocks, every topic's level at 2), everything below measured on the "test" rows at those defaults: benign
blocked (safe rows blocked; and benign *requests* only), recall of unsafe rows at severity >= 2 and of all unsafe
rows, unsafe AUPRC, severity within one and topic macro-F1 (metrics.guard_metrics), and the pair rate: for each
shared reply text in test (the same Gemma-written opener after a harmful and after a benign request), the share of
(harmful, benign) pairs where the harmful one is blocked and the benign one is not.
Gemma layer and pooling: every (layer, pool) gets an unsafe-only probe on train, scored by validation AUPRC; the
best "mean" and the best "last" get the full heads. Latency: in this process, one thread; per text (batch 1,
one response with its request) and throughput through the engine's dynamic batcher at concurrency 8."""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from services.moderation.decision import Item, Thresholds, block_decisions, choose_defaults  # noqa: E402
from services.moderation.guard import GuardModel, LinearHeads, Targets, base_config, fit_frozen_linear  # noqa: E402
from services.moderation.metrics import average_precision, guard_metrics  # noqa: E402
from services.moderation.schema import parse_guard_jsonl  # noqa: E402

PAIRS = ROOT / "services/moderation/data/gemma_pairs.jsonl"


def data_stats(rows) -> None:
    print(f"## data: {len(rows)} rows ({PAIRS.name})")
    print("split      " + "  ".join(f"{s}: {sum(r.split == s for r in rows)} "
                                    f"({sum(r.split == s and r.unsafe for r in rows)} unsafe)"
                                    for s in ("train", "validation", "test")))
    print("topic      " + "  ".join(f"{t}: {n}" for t, n in sorted(Counter(r.topics[0] for r in rows).items(),
                                                                      key=lambda x: int(x[0][1:]))))
    print("topic unsafe " + "  ".join(f"{t}: {n}" for t, n in sorted(
        Counter(r.topics[0] for r in rows if r.unsafe).items(), key=lambda x: int(x[0][1:]))))
    print("severity   " + "  ".join(f"{k}: {n}" for k, n in sorted(Counter(
        max(r.severity.values()) for r in rows).items())))
    print("source     " + "  ".join(f"{k}: {n}" for k, n in sorted(Counter(r.source for r in rows).items())))
    print("role       " + "  ".join(f"{k}: {n}" for k, n in sorted(Counter(r.role for r in rows).items())))


def pair_rate(rows, blocked) -> tuple[float, int]:
    by_text: dict[str, tuple[list[int], list[int]]] = {}
    for i, r in enumerate(rows):
        if r.role == "response" and r.source.endswith("/shared_opener"):
            h, b = by_text.setdefault(r.text, ([], []))
            (h if r.unsafe else b).append(i)
    ok = n = 0
    for h, b in by_text.values():
        for i in h:
            for j in b:
                n += 1
                ok += bool(blocked[i] and not blocked[j])
    return (ok / n if n else float("nan")), n


def held_out_metrics(blocked, score, pred, test) -> dict:
    """The table's numbers for test rows: their block decisions, unsafe scores and whole-text predictions."""
    y = np.array([r.unsafe for r in test])
    sev = np.array([max(r.severity.values()) for r in test])
    benign_req = np.array([not r.unsafe and r.role == "prompt" for r in test])
    m = guard_metrics(pred, Targets.from_examples(test))
    pr, n_pairs = pair_rate(test, blocked)
    return {"benign_blocked": float(blocked[~y].mean()), "benign_requests_blocked": float(blocked[benign_req].mean()),
            "recall_sev2": float(blocked[y & (sev >= 2)].mean()), "recall_all": float(blocked[y].mean()),
            "auprc": average_precision(score, y), "severity_within_one": m.get("severity_within_one"),
            "topic_macro_f1": m["topic_macro_f1"], "pair_rate": pr, "n_pairs": n_pairs}


def evaluate(name, pred_va, val, pred_te, test) -> dict:
    d = choose_defaults(pred_va, val)
    blocked = block_decisions(pred_te, Thresholds().resolve(d))
    return {"guard": name, **held_out_metrics(blocked, pred_te["unsafe"], pred_te, test),
            "unsafe_threshold": d["unsafe_threshold"], "topic_threshold": d["topic_threshold"],
            "val_fbr": d["false_block_rate"], "val_recall": d["recall"]}


def print_table(results) -> None:
    cols = ["guard", "benign_blocked", "benign_requests_blocked", "recall_sev2", "recall_all", "auprc",
            "severity_within_one", "topic_macro_f1", "pair_rate", "n_pairs", "unsafe_threshold", "topic_threshold"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")


def gemma_hidden(rows, model_dir: str, specs, cache: Path) -> list[np.ndarray]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.moderation.gemma_guard import GemmaBackbone, render

    rendered = [render(r.text, r.role, r.prompt) for r in rows]
    key = hashlib.sha256(repr((rendered, specs)).encode()).hexdigest()[:16]
    f = cache / f"gemma-guard-hidden-{key}.npz"
    if f.exists():
        z = np.load(f)
        return [z[f"a{i}"] for i in range(len(specs))]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    bb = GemmaBackbone(model, tok, layer=max(lay for lay, _ in specs))
    t0 = time.time()
    out = bb.pooled_many(rendered, specs, batch_size=16)
    print(f"gemma hidden states of {len(rows)} rows: {time.time() - t0:.0f} s", flush=True)
    np.savez(f, **{f"a{i}": a for i, a in enumerate(out)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/gemma/cache")
    ap.add_argument("--layers", default="4,6,9,12,15,18")
    ap.add_argument("--l2", type=float, default=1e-3)
    ap.add_argument("--latency-texts", type=int, default=32)
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--max-iter", type=int, default=15, help="Newton iterations of the full heads")
    ap.add_argument("--finetune-epochs", type=int, default=0, help="also the finetune kind (all 6 layers)")
    ap.add_argument("--only-minilm", action="store_true", help="with --finetune-epochs: stop after the MiniLM kinds")
    ap.add_argument("--every", type=int, default=1, help="every n-th row only (a smoke run)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    from services.generation import pretrained
    from services.common.minilm import get_base_encoder
    from services.moderation.gemma_guard import GemmaBackbone, GemmaGuard, gemma_config, pair_features, standardiser
    from services.moderation.jobs.train_guard import example_features

    rows = parse_guard_jsonl(PAIRS.read_bytes())[::a.every]
    data_stats(rows)
    idx = {s: [i for i, r in enumerate(rows) if r.split == s] for s in ("train", "validation", "test")}
    sub = {s: [rows[i] for i in ix] for s, ix in idx.items()}
    y_tr = Targets.from_examples(sub["train"])
    results = []

    t0 = time.time()
    enc = get_base_encoder()
    fcache = Path(a.cache) / ("minilm-guard-phi-" + hashlib.sha256(repr(
        [(r.text, r.role, r.prompt) for r in rows]).encode()).hexdigest()[:16] + ".npy")
    if fcache.exists():
        phi = np.load(fcache)
    else:
        phi = example_features(None, rows)
        np.save(fcache, phi)
    heads = fit_frozen_linear(phi[idx["train"]], y_tr, 1e-4, max_iter=a.max_iter, tol=1e-6)
    minilm = GuardModel("frozen_linear", heads, base_config("frozen_linear", enc, 1e-4), enc)
    pv, pt = minilm.predict_from_features(phi[idx["validation"]]), minilm.predict_from_features(phi[idx["test"]])
    results.append(evaluate("minilm frozen_linear (l2 1e-4)", pv, sub["validation"], pt, sub["test"]))
    print(f"minilm: {time.time() - t0:.0f} s", flush=True)
    if a.finetune_epochs:
        from services.moderation.guard import FinetuneTrainer

        t0 = time.time()
        tr = FinetuneTrainer(enc, heads, trainable_layers=6, l2=1e-4, lr=3e-5, head_lr=1e-3, batch_size=16, seed=0)
        for e in range(a.finetune_epochs):
            tr.train_epoch([r.text for r in sub["train"]], [r.role for r in sub["train"]], y_tr, e,
                           [r.prompt for r in sub["train"]])
        ft = tr.to_model(base_config("finetune", enc, 1e-4))
        pv, pt = (ft.predict_proba([r.text for r in sub[s]], [r.role for r in sub[s]], [r.prompt for r in sub[s]])
                  for s in ("validation", "test"))
        results.append(evaluate(f"minilm finetune (6 layers, {a.finetune_epochs} epochs)", pv, sub["validation"],
                                pt, sub["test"]))
        print(f"minilm finetune: {time.time() - t0:.0f} s", flush=True)
        if a.only_minilm:
            print_table(results)
            return

    model_dir = str(pretrained.hf_directory(a.cache))
    layers = [int(x) for x in a.layers.split(",")]
    specs = [(lay, pool) for lay in layers for pool in ("mean", "last")]
    hs = gemma_hidden(rows, model_dir, specs, Path(a.cache))
    print("\n## Gemma layer / pooling (unsafe-only probe on train; validation AUPRC)")
    probe = {}
    for (lay, pool), h in zip(specs, hs, strict=True):
        mu, sd = standardiser(h[idx["train"]])
        ph = pair_features(h, mu, sd, [r.role for r in rows], np.array([r.prompt is not None for r in rows]))
        yv = np.array([r.unsafe for r in sub["validation"]])
        from services.moderation.guard import newton_block_step
        X = np.concatenate([ph[idx["train"]], np.ones((len(idx["train"]), 1))], 1)
        theta = np.zeros(X.shape[1])
        for _ in range(30):
            theta, g = newton_block_step(theta, X, y_tr.unsafe, np.full(len(X), 1 / len(X)), a.l2)
            if g < 1e-6:
                break
        s = np.concatenate([ph[idx["validation"]], np.ones((len(yv), 1))], 1) @ theta
        probe[(lay, pool)] = average_precision(s, yv)
        print(f"layer {lay:2d} {pool:4s}: val AUPRC {probe[(lay, pool)]:.3f}", flush=True)
    chosen = [max((k for k in probe if k[1] == p), key=probe.get) for p in ("mean", "last")]
    from services.moderation.params import GuardTrainParams

    job_default = (GuardTrainParams.model_fields["layer"].default, GuardTrainParams.model_fields["pool"].default)
    if job_default in probe and job_default not in chosen:  # the kind's default is always reported
        chosen.insert(0, job_default)
    guards = {}
    for lay, pool in chosen:
        h = hs[specs.index((lay, pool))]
        mu, sd = standardiser(h[idx["train"]])
        ph = pair_features(h, mu, sd, [r.role for r in rows], np.array([r.prompt is not None for r in rows]))
        t0 = time.time()
        heads = fit_frozen_linear(ph[idx["train"]], y_tr, a.l2, max_iter=a.max_iter, tol=1e-6,
                                  heads=LinearHeads.init(ph.shape[1]))
        cfg = gemma_config({}, model_version_id="local", layer=lay, pool=pool, l2=a.l2, hidden_size=h.shape[1])
        g = GemmaGuard(heads, cfg, None, mu, sd)
        pv, pt = g.predict_from_features(ph[idx["validation"]]), g.predict_from_features(ph[idx["test"]])
        res = evaluate(f"gemma_frozen layer {lay} {pool} (l2 {a.l2:g})", pv, sub["validation"], pt, sub["test"])
        results.append(res)
        g.config["decision_defaults"] = choose_defaults(pv, sub["validation"])
        guards[(lay, pool)] = g
        g._phi_all = ph
        print(f"gemma heads {lay} {pool}: {time.time() - t0:.0f} s", flush=True)
    print("\n## held-out test rows, each guard at the defaults it chose on validation")
    print_table(results)
    if a.no_latency:
        return
    best = chosen[0]  # the teacher and the timed guard: the kind's default (picked before any test row is seen)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    g = guards[best]
    student = distil(g, best, rows, idx, sub, results, Path(a.cache))
    print("\n## held-out test rows with the student")
    print_table(results)
    if a.no_latency:
        return
    g.backbone = GemmaBackbone(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                               AutoTokenizer.from_pretrained(model_dir), layer=best[0])
    latency(minilm, g, student, [r for r in sub["test"] if r.role == "response" and r.prompt][:a.latency_texts])


def distil(g, best, rows, idx, sub, results, cache: Path):
    """Item 3 of the issue, without HarmAug's augmentation (that generator is another piece of work): the
    bag-of-n-grams student (distill.py) trained with the HarmAug loss on the train rows, the teacher being the Gemma
    guard's probabilities; its agreement with the teacher on the test rows' decisions."""
    from services.moderation.distill import StudentConfig, TrainConfig, train_student

    tr = sub["train"]
    ph_all = g._phi_all
    teacher = g.predict_from_features(ph_all[idx["train"]])
    t0 = time.time()
    st = train_student([r.text for r in tr], [r.role for r in tr], np.array([int(r.unsafe) for r in tr]), teacher,
                       StudentConfig(), TrainConfig(epochs=30), [r.prompt for r in tr])
    print(f"student trained in {time.time() - t0:.0f} s", flush=True)
    def proba(m, rr):
        return m.predict_proba([r.text for r in rr], [r.role for r in rr], [r.prompt for r in rr])
    sv, stt = proba(st, sub["validation"]), proba(st, sub["test"])
    results.append(evaluate("student (distilled from gemma)", sv, sub["validation"], stt, sub["test"]))
    d_t = g.config["decision_defaults"]
    bt = block_decisions(g.predict_from_features(ph_all[idx["test"]]), Thresholds().resolve(d_t))
    bs_t = block_decisions(stt, Thresholds().resolve(d_t))
    bs_o = block_decisions(stt, Thresholds().resolve(choose_defaults(sv, sub["validation"])))
    print(f"student/teacher decision agreement on test: at the teacher's defaults {(bs_t == bt).mean():.3f}, "
          f"each at its own {(bs_o == bt).mean():.3f}", flush=True)
    return st


def latency(minilm, gemma, student, rows) -> None:
    from services.moderation.decision import moderate_items
    from services.moderation.serving import Batcher

    items = [Item(r.text, r.role, r.prompt) for r in rows]
    print(f"\n## latency: {len(items)} responses with their requests, one thread, this process")
    print("| guard | per text, batch 1 (ms, mean) | concurrency 8 via the batcher (texts/s) | p50 ms | "
          "cost / MiniLM's |")
    print("|---|---|---|---|---|")
    base = None
    for name, m in (("minilm frozen_linear", minilm), ("gemma_frozen", gemma), ("student", student)):
        def fresh(it, i, tag):  # unique text and prompt: MiniLM's per-text embedding cache never answers
            return Item(f"{it.text} (ref {tag}{i})", it.role, f"{it.prompt} (ref {tag}{i})")
        moderate_items(m, [fresh(it, i, "w") for i, it in enumerate(items[:2])], Thresholds())  # warm-up
        t0 = time.perf_counter()
        for i, it in enumerate(items):
            moderate_items(m, [fresh(it, i, "a")], Thresholds())
        per = 1000 * (time.perf_counter() - t0) / len(items)

        async def conc(m=m):
            b = Batcher(max_batch=32, max_wait_ms=2.0, workers=1)
            lat = []
            queue = [fresh(it, i, "b") for i, it in enumerate(items)]

            async def worker():
                while queue:
                    it = queue.pop()
                    s = time.perf_counter()
                    await b.submit_many(m, [it], Thresholds())
                    lat.append(time.perf_counter() - s)
            s0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(8)))
            wall = time.perf_counter() - s0
            await b.close()
            return len(items) / wall, 1000 * sorted(lat)[len(lat) // 2]
        tps, p50 = asyncio.run(conc())
        base = base or per
        print(f"| {name} | {per:.1f} | {tps:.1f} | {p50:.0f} | {per / base:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
