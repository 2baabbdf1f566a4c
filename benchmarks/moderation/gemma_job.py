"""The Gemma guards as a user gets them (issue 35's "default guard at its default thresholds"): Gemma 3 270M
registered from its packaged GGUF as the generation service's import registers it, then the moderation.train_guard
job run with nothing but the kind and the backbone (no dataset: the packaged real-request pairs; every other
parameter at the job's default), the registered version loaded as serving loads it (serving.build_guard), and the
test rows of the pairs moderated through the service's decision path (decision.moderate_items: chunking, the
request as context, the registered decision defaults, level 2) in padded batches as the engine's batcher scores.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/moderation/gemma_job.py [--kinds gemma_lora,gemma_frozen]
        [--cache /tmp/gemma/cache] [--seed 0] [--student]

Printed per kind: the job's wall time, its validation metrics and defaults, and on the test rows: benign blocked
(and benign requests blocked), recall of severity >= 2 rows and of all unsafe rows, AUPRC of the served unsafe score,
severity within one / topic macro-F1 (whole-text predictions) and the pair rate (gemma_guard.pair_rate)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.moderation.gemma_guard import held_out_metrics  # noqa: E402


def measure(guard, test) -> dict:
    from services.moderation.decision import Item, Thresholds, moderate_items

    res = moderate_items(guard, [Item(r.text, r.role, r.prompt) for r in test], Thresholds(), batched=True)
    predict = getattr(guard, "predict_proba_batched", guard.predict_proba)   # the Gemma guards batch; MiniLM caches
    whole = predict([r.text for r in test], [r.role for r in test], [r.prompt for r in test])
    return {**held_out_metrics(np.array([x.blocked for x in res]), np.array([x.unsafe_score for x in res]), whole,
                               test),
            "kinds_answered": sorted({x.model_kind for x in res})}


def student_of(ctx, teacher_id: str, teacher, test, seed: int) -> None:
    """Two distillations of a registered guard, each served at its own registered defaults: the HarmAug student
    (the moderation.distill job at its defaults: no dataset, so the packaged set of the teacher's kind; 1200 template
    texts labelled by the teacher), and MiniLM frozen_linear heads trained on the teacher's probabilities
    (moderation.train_guard with teacher_model_version_id); each one's decisions' agreement with the teacher's on the
    test rows, all through the decision path, and the cost per text of each at batch 1 and through padded batches of
    32 (one thread, this process)."""
    from services.moderation.decision import Item, Thresholds, moderate_items
    from services.moderation.jobs.distill import run_distillation
    from services.moderation.serving import build_guard

    from services.moderation.jobs.train_guard import run_guard_training

    items = [Item(r.text, r.role, r.prompt) for r in test]
    bt = np.array([x.blocked for x in moderate_items(teacher, items, Thresholds(), batched=True)])
    students = {}
    runs = (("student", "the distill job's defaults", run_distillation,
             {"teacher_model_version_id": teacher_id, "model_name": "guard-student", "seed": seed}),
            ("MiniLM frozen_linear", "train_guard with teacher_model, defaults", run_guard_training,
             {"teacher_model_version_id": teacher_id, "model_name": "guard-distilled"}))
    for name, how, run, params in runs:
        ctx.params.clear()
        ctx.params.update(params)
        t0 = time.time()
        out = run(ctx)
        took = time.time() - t0
        _i, st, sc, _l = ctx.models[out["model_version_id"]]
        student = students[name] = build_guard(st, sc, {"name": params["model_name"], "version": 1,
                                                        "id": out["model_version_id"]}).obj
        own = np.array([x.blocked for x in moderate_items(student, items, Thresholds(), batched=True)])
        at_teacher = np.array([x.blocked for x in moderate_items(
            student, items, Thresholds(), batched=True, decision_defaults=teacher.config["decision_defaults"])])
        m = measure(student, test)
        n_aug = int(out["metrics"].get("n_augment", 0))
        print(f"\n## {name} distilled from {teacher.kind} ({how}, {took:.0f} s; {sc.get('n_train')} train rows"
              f"{f' + {n_aug} augmented' if n_aug else ''})", flush=True)
        print(f"test decision agreement with the teacher: at its own defaults {(own == bt).mean():.3f}, at "
              f"the teacher's {(at_teacher == bt).mean():.3f}; it: " + ", ".join(
                  f"{k} {v:.3f}" for k, v in m.items() if isinstance(v, float)), flush=True)
    some = items[:32]
    for name, g in ((teacher.kind, teacher), *students.items()):
        t0 = time.time()
        for it in some:
            moderate_items(g, [it], Thresholds())
        one = (time.time() - t0) / len(some)
        t0 = time.time()
        moderate_items(g, some, Thresholds(), batched=True)
        print(f"cost per text, {name}: batch 1 {1000 * one:.2f} ms, batched {1000 * (time.time() - t0) / len(some):.2f}"
              f" ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="gemma_lora,gemma_frozen")
    ap.add_argument("--cache", default="/tmp/gemma/cache")
    ap.add_argument("--seed", type=int, default=0, help="the job's seed (LoRA init and shuffles)")
    ap.add_argument("--student", action="store_true",
                    help="also distill the first kind's guard with the moderation.distill job's defaults")
    a = ap.parse_args()
    torch.set_num_threads(1)
    from services.common import hf
    from services.common.jobcontext import InMemoryJobContext
    from services.generation import pretrained
    from services.moderation.jobs.train_guard import run_guard_training
    from services.moderation.schema import load_packaged_dataset
    from services.moderation.serving import build_guard

    t0 = time.time()
    tensors, config = hf.gguf_to_registry(pretrained.gguf_file(a.cache))
    print(f"Gemma 3 270M registered from its GGUF: {time.time() - t0:.0f} s", flush=True)
    test = [r for r in load_packaged_dataset("real_requests") if r.split == "test"]
    rows = []
    for kind in a.kinds.split(","):
        ctx = InMemoryJobContext(params={})
        lm = ctx.register_model("gemma-3-270m", tensors, kind="language_model", config=config)
        ctx.params.update({"kind": kind, "backbone_model_version_id": lm.model_version_id, "seed": a.seed,
                           "model_name": f"guard-{kind}"})
        t0 = time.time()
        out = run_guard_training(ctx)
        took = time.time() - t0
        _info, g_tensors, g_config, _lineage = ctx.models[out["model_version_id"]]
        guard = build_guard(g_tensors, g_config, {"name": f"guard-{kind}", "version": 1,
                                                  "id": out["model_version_id"]}).obj
        d = g_config["decision_defaults"]
        bb = g_config.get("backbone") or {}
        print(f"\n## {kind}: job {took:.0f} s; params l2 {g_config['l2']}"
              f"{', layer %s' % bb['layer'] if bb else ''}{', lora %s' % bb['lora'] if 'lora' in bb else ''}",
              flush=True)
        print(f"validation (chosen there): unsafe >= {d['unsafe_threshold']}, topic >= {d['topic_threshold']}, "
              f"benign blocked {d['false_block_rate']:.3f}, recall sev>=2 {d['recall']:.3f}; "
              f"val AUPRC {out['metrics'].get('val_unsafe_auprc', float('nan')):.3f}", flush=True)
        t0 = time.time()
        m = measure(guard, test)
        print(f"test ({len(test)} rows, {time.time() - t0:.0f} s): " + ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items()), flush=True)
        rows.append((kind, m))
        if a.student and kind == a.kinds.split(",")[0]:
            student_of(ctx, out["model_version_id"], guard, test, a.seed)
    print("\n| kind (job defaults, seed %d) | benign blocked | benign requests blocked | recall sev>=2 | AUPRC | "
          "severity within one | topic macro-F1 | pair rate |" % a.seed)
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, m in rows:
        print(f"| {kind} | {m['benign_blocked']:.3f} | {m['benign_requests_blocked']:.3f} | {m['recall_sev2']:.3f} | "
              f"{m['auprc']:.3f} | {m['severity_within_one']:.3f} | {m['topic_macro_f1']:.3f} | "
              f"{m['pair_rate']:.3f} |")


if __name__ == "__main__":
    main()
