"""A HarmAug student (services/moderation/distill.py) distilled from the Gemma guard (gemma_frozen), and how often it
agrees with its teacher (issue 35, item 3: >= 0.9 of held-out decisions at >= 20x lower cost per text).

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python benchmarks/moderation/gemma_student.py [--cache /tmp/gemma/cache]
        [--cross 4000] [--seeds 0,1] [--only 'NAME;NAME'] [--no-latency]

Teacher: fitted as benchmarks/moderation/gemma_guard.py does (its gemma_hidden and cache; layer 6 mean by default,
the product's default): standardiser and pair_features on the train rows, fit_frozen_linear (l2 1e-3, 15 Newton
iterations), decision defaults chosen on validation (choose_defaults). The teacher's probabilities label every
student training row (soft labels) and the augmented rows' hard labels (P(unsafe) > 0.5, HarmAug).
Augmentation: recombined pairs (distill.recombine_pairs: train requests x train replies not in the data, the
teacher = Gemma run on each new pair, cached like gemma_hidden) -- a cheap stand-in for HarmAug's LLM generator.
Agreement = share of rows where block_decisions(student) == block_decisions(teacher at its defaults), the student
at the teacher's defaults ("@teacher") and at its own defaults chosen on validation ("@own").
Every configuration is scored on the VALIDATION rows only (mean over --seeds); the one with the best mean of the two
validation agreements is then trained once more (first seed) and measured ONCE on the test rows.
Cost: per text at batch 1 (moderate_items, one response with its request) and batched (predict_proba_batched, 32
texts), one thread, student and Gemma guard in this process; the ratio is Gemma / student."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks/moderation"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gemma_guard as gg  # noqa: E402
from services.moderation.augment import TemplateGenerator  # noqa: E402
from services.moderation.decision import Item, Thresholds, block_decisions, choose_defaults  # noqa: E402
from services.moderation.distill import StudentConfig, TrainConfig, recombine_pairs, train_student  # noqa: E402
from services.moderation.guard import LinearHeads, Targets, fit_frozen_linear  # noqa: E402
from services.moderation.schema import parse_guard_jsonl  # noqa: E402

# name -> (recombined pairs, template texts (augment.TemplateGenerator, the job's default generator), StudentConfig
# overrides, TrainConfig overrides, hard labels of the real rows: the dataset's or the teacher's decision)
CONFIGS = {
    # grid 1: the augmentation (student defaults)
    "plain": (0, 0, {}, {}, "data"),
    "plain, hard=teacher": (0, 0, {}, {}, "teacher"),
    "templates 1200": (0, 1200, {}, {}, "data"),
    "cross 1000": (1000, 0, {}, {}, "data"),
    "cross 2000": (2000, 0, {}, {}, "data"),
    "cross 4000": (4000, 0, {}, {}, "data"),
    "cross 4000 + templates 1200": (4000, 1200, {}, {}, "data"),
    "cross 4000, hard=teacher": (4000, 0, {}, {}, "teacher"),
    "cross 4000, 60 epochs": (4000, 0, {}, {"epochs": 60}, "data"),
    # grid 2: on the best augmentation of grid 1 (templates 1200), the student's options
    "templates 2400": (0, 2400, {}, {}, "data"),
    "templates 1200 + cross 500": (500, 1200, {}, {}, "data"),
    "templates 1200, 60 epochs": (0, 1200, {}, {"epochs": 60}, "data"),
    "templates 1200, dim/hidden 128": (0, 1200, {"dim": 128, "hidden": 128}, {}, "data"),
    "templates 1200, e*c": (0, 1200, {"interaction": True}, {}, "data"),
    "templates 1200, buckets 16384": (0, 1200, {"buckets": 16384}, {}, "data"),
    "templates 1200, aux 0": (0, 1200, {}, {"aux_weight": 0.0}, "data"),
    "templates 1200, e*c, 60 epochs": (0, 1200, {"interaction": True}, {"epochs": 60}, "data"),
}


def teacher_guard(rows, idx, h, layer: int, pool: str, l2: float):
    from services.moderation.gemma_guard import GemmaGuard, gemma_config, pair_features, standardiser

    mu, sd = standardiser(h[idx["train"]])
    ph = pair_features(h, mu, sd, [r.role for r in rows], np.array([r.prompt is not None for r in rows]))
    heads = fit_frozen_linear(ph[idx["train"]], Targets.from_examples([rows[i] for i in idx["train"]]), l2,
                              max_iter=15, tol=1e-6, heads=LinearHeads.init(ph.shape[1]))
    cfg = gemma_config({}, model_version_id="local", layer=layer, pool=pool, l2=l2, hidden_size=h.shape[1])
    g = GemmaGuard(heads, cfg, None, mu, sd)
    return g, ph


def agreement(st_va, st_te, val, t_dec_va, t_dec_te, d_teacher) -> dict:
    """Decision agreement with the teacher: the student at the teacher's defaults and at its own (validation)."""
    own = choose_defaults(st_va, val)
    out = {}
    for tag, d in (("teacher", d_teacher), ("own", own)):
        th = Thresholds().resolve(d)
        out[f"val@{tag}"] = float((block_decisions(st_va, th) == t_dec_va).mean())
        if st_te is not None:
            out[f"test@{tag}"] = float((block_decisions(st_te, th) == t_dec_te).mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/gemma/cache")
    ap.add_argument("--lead-layers", default="6,9", help="the layers of gemma_guard.py's run whose cache is read")
    ap.add_argument("--layer", type=int, default=6)
    ap.add_argument("--pool", default="mean")
    ap.add_argument("--l2", type=float, default=1e-3)
    ap.add_argument("--cross", type=int, default=4000, help="recombined pairs drawn (and run through Gemma)")
    ap.add_argument("--cross-seed", type=int, default=0)
    ap.add_argument("--seeds", default="0,1", help="student seeds averaged on validation")
    ap.add_argument("--only", default="", help="CONFIGS names separated by ; (default: all)")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--latency-texts", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(1)
    from services.generation import pretrained
    from services.moderation.gemma_guard import pair_features

    rows = parse_guard_jsonl(gg.PAIRS.read_bytes())
    idx = {s: [i for i, r in enumerate(rows) if r.split == s] for s in ("train", "validation", "test")}
    sub = {s: [rows[i] for i in ix] for s, ix in idx.items()}
    print(f"## data: {len(rows)} rows; " + ", ".join(f"{s} {len(ix)}" for s, ix in idx.items()))
    model_dir = str(pretrained.hf_directory(a.cache))
    specs = [(int(x), p) for x in a.lead_layers.split(",") for p in ("mean", "last")]
    if (a.layer, a.pool) not in specs:
        specs = [(a.layer, a.pool)]
    hs = gg.gemma_hidden(rows, model_dir, specs, Path(a.cache))
    g, ph = teacher_guard(rows, idx, hs[specs.index((a.layer, a.pool))], a.layer, a.pool, a.l2)
    t_all = g.predict_from_features(ph)
    t_part = {s: {k: v[ix] for k, v in t_all.items()} for s, ix in idx.items()}
    d_teacher = choose_defaults(t_part["validation"], sub["validation"])
    th_t = Thresholds().resolve(d_teacher)
    t_dec = {s: block_decisions(t_part[s], th_t) for s in ("validation", "test")}
    teacher_res = gg.evaluate(f"teacher gemma_frozen layer {a.layer} {a.pool}", t_part["validation"],
                              sub["validation"], t_part["test"], sub["test"])
    print(f"teacher defaults: unsafe threshold {d_teacher['unsafe_threshold']:.3f}, "
          f"topic threshold {d_teacher['topic_threshold']:.3f}")

    def labelled(extra, what):
        t0 = time.time()
        ha = gg.gemma_hidden(extra, model_dir, [(a.layer, a.pool)], Path(a.cache))[0]
        t = g.predict_from_features(pair_features(ha, g.mu, g.sd, [x.role for x in extra],
                                                  np.array([x.prompt is not None for x in extra])))
        print(f"{what}: {len(extra)} (Gemma features ready in {time.time() - t0:.0f} s); teacher P(unsafe) > 0.5 on "
              f"{np.mean(t['unsafe'] > 0.5):.3f}", flush=True)
        return t

    aug = recombine_pairs(sub["train"], a.cross, seed=a.cross_seed)
    t_aug = labelled(aug, "recombined pairs")
    tmpl, t_tmpl = {}, {}   # per size, as the job draws them (generate(n) is not a prefix of generate(2n))
    for n in sorted({c[1] for name, c in CONFIGS.items() if c[1] and (not a.only or name in a.only.split(";"))}):
        tmpl[n] = TemplateGenerator().generate(n, seed=0, exclude=[r.text for r in rows])
        t_tmpl[n] = labelled(tmpl[n], f"template texts ({n})")

    tr = sub["train"]
    hard_data = np.array([int(r.unsafe) for r in tr])
    hard_teacher = (t_part["train"]["unsafe"] > 0.5).astype(int)

    def fit(name, seed):
        n_cross, n_tmpl, scfg, tcfg, hard_mode = CONFIGS[name]
        ax = aug[:n_cross] + tmpl.get(n_tmpl, [])
        t_x = {k: np.concatenate([t_aug[k][:n_cross]] + ([t_tmpl[n_tmpl][k]] if n_tmpl else [])) for k in t_all}
        texts = [r.text for r in tr] + [x.text for x in ax]
        roles = [r.role for r in tr] + [x.role for x in ax]
        ctx = [r.prompt for r in tr] + [x.prompt for x in ax]
        hard = np.concatenate([hard_data if hard_mode == "data" else hard_teacher,
                               (t_x["unsafe"] > 0.5).astype(int)])
        teacher = {k: np.concatenate([t_part["train"][k], t_x[k]]) for k in t_all}
        t0 = time.time()
        st = train_student(texts, roles, hard, teacher, StudentConfig(**scfg), TrainConfig(**{"seed": seed, **tcfg}),
                           ctx)
        return st, time.time() - t0

    def proba(st, rr):
        return st.predict_proba_batched([r.text for r in rr], [r.role for r in rr], [r.prompt for r in rr])

    seeds = [int(s) for s in a.seeds.split(",")]
    names = [n for n in CONFIGS if not a.only or n in a.only.split(";")]
    print("\n## validation agreement with the teacher (mean over seeds " + a.seeds + ")")
    print("| configuration | rows | val agreement @teacher defaults | val agreement @own defaults | train s |")
    print("|---|---|---|---|---|")
    scores = {}
    for name in names:
        res = []
        for seed in seeds:
            st, secs = fit(name, seed)
            r = agreement(proba(st, sub["validation"]), None, sub["validation"], t_dec["validation"], None,
                          d_teacher)
            res.append((r["val@teacher"], r["val@own"], secs))
        m = np.mean(res, 0)
        scores[name] = (m[0] + m[1]) / 2
        print(f"| {name} | {len(tr) + CONFIGS[name][0] + CONFIGS[name][1]} | {m[0]:.3f} | {m[1]:.3f} | {m[2]:.0f} |", flush=True)

    best = max(scores, key=scores.get)
    print(f"\n## chosen on validation: {best!r}; the test rows, measured once (seed {seeds[0]})")
    st, secs = fit(best, seeds[0])
    sv, stt = proba(st, sub["validation"]), proba(st, sub["test"])
    r = agreement(sv, stt, sub["validation"], t_dec["validation"], t_dec["test"], d_teacher)
    print(f"student/teacher decision agreement on test: at the teacher's defaults {r['test@teacher']:.3f}, "
          f"at its own defaults {r['test@own']:.3f} (validation {r['val@teacher']:.3f} / {r['val@own']:.3f}); "
          f"trained in {secs:.0f} s")
    # A third decision rule, for the record (not the job's): the teacher's defaults with the student's unsafe
    # threshold moved to the value (grid 0.05..0.95) that agrees most with the teacher on VALIDATION.
    grid = np.round(np.arange(0.05, 0.951, 0.01), 2)
    va = [(block_decisions(sv, Thresholds().resolve({**d_teacher, "unsafe_threshold": u})) == t_dec["validation"]
           ).mean() for u in grid]
    u = float(grid[int(np.argmax(va))])
    te = (block_decisions(stt, Thresholds().resolve({**d_teacher, "unsafe_threshold": u})) == t_dec["test"]).mean()
    print(f"  ... with the student's unsafe threshold matched to the teacher on validation ({u:.2f}): validation "
          f"{max(va):.3f}, test {te:.3f}")
    gg.print_table([teacher_res, gg.evaluate(f"student ({best})", sv, sub["validation"], stt, sub["test"])])
    bs = block_decisions(stt, th_t)
    print("\ntest disagreements at the teacher's defaults, by row kind: student blocks alone / teacher blocks alone "
          "(of rows)")
    for kind in sorted({r.source.split("/")[-1] for r in sub["test"]}):
        m = np.array([r.source.split("/")[-1] == kind for r in sub["test"]])
        print(f"  {kind:14s} {int((bs & ~t_dec['test'] & m).sum()):3d} / {int((~bs & t_dec['test'] & m).sum()):3d}"
              f" (of {int(m.sum())})")
    if not a.no_latency:
        latency(g, st, model_dir, [r for r in sub["test"] if r.role == "response" and r.prompt][:a.latency_texts])


def latency(g, student, model_dir: str, rows) -> None:
    """Cost per text in this process, one thread: batch 1 through moderate_items (as a request is served) and one
    batched forward of all texts (predict_proba_batched), the Gemma guard vs the student."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.moderation.decision import moderate_items
    from services.moderation.gemma_guard import GemmaBackbone

    g.backbone = GemmaBackbone(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                               AutoTokenizer.from_pretrained(model_dir), layer=g.config["backbone"]["layer"])
    items = [Item(r.text, r.role, r.prompt) for r in rows]
    out = {}
    for name, m in (("gemma_frozen", g), ("student", student)):
        moderate_items(m, items[:2], Thresholds())  # warm-up
        t0 = time.perf_counter()
        for it in items:
            moderate_items(m, [it], Thresholds())
        one = 1000 * (time.perf_counter() - t0) / len(items)
        t0 = time.perf_counter()
        m.predict_proba_batched([it.text for it in items], [it.role for it in items], [it.prompt for it in items])
        batched = 1000 * (time.perf_counter() - t0) / len(items)
        out[name] = (one, batched)
    print(f"\n## cost per text: {len(items)} responses with their requests, one thread, this process")
    print("| guard | batch 1 (ms/text) | batched, 32 (ms/text) |")
    print("|---|---|---|")
    for name, (one, batched) in out.items():
        print(f"| {name} | {one:.2f} | {batched:.3f} |")
    (g1, gb), (s1, sb) = out["gemma_frozen"], out["student"]
    print(f"Gemma guard / student: {g1 / s1:.0f}x at batch 1, {gb / sb:.0f}x batched")


if __name__ == "__main__":
    main()
