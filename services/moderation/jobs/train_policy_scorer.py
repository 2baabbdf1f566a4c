"""moderation.train_policy_scorer: the SafeWatch-style rule scorer (policies.py), trained with the BingoGuard topic
rubrics as rules over the dataset's train rows, registered as kind "policy_scorer"."""
from __future__ import annotations

from typing import Any

from services.common.jobcontext import JobContext
from services.common.params import parse_params
from services.common.minilm import get_base_encoder
from services.moderation.jobs.data import load_examples, split_examples
from services.moderation.params import PolicyScorerTrainParams
from services.moderation.policies import train_policy_scorer


def run_policy_scorer_training(ctx: JobContext) -> dict[str, Any]:
    p = parse_params(PolicyScorerTrainParams, ctx.params, prefix="params.")
    train, _ = split_examples(load_examples(ctx, p.dataset_artifact_id, p.format), p.validation_fraction)
    ctx.check_cancelled()
    ctx.progress(0.1, "training policy scorer")
    scorer = train_policy_scorer(get_base_encoder(), train, l2=float(p.l2), seed=int(p.seed))
    tensors, cfg = scorer.to_registry()
    info = ctx.register_model(p.model_name, tensors, kind="policy_scorer", config=cfg,
                              dataset_artifact_id=p.dataset_artifact_id)
    ctx.progress(1.0, "registered")
    return {"model_version_id": info.model_version_id, "name": info.name}
