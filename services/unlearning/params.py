"""The unlearning service's job parameters: one pydantic model per job kind (issue 11), validated once with
`services.common.params.parse_params` by the request layer (records.py, from the proto) at submit; the worker hands
the job the typed object (workers/runner.py). Field names are the proto's, so a violation names the field
the caller sent (the one exception, `lr`, is the request's `learning_rate`: see FIELD_PATHS).

  unlearning.train    TrainParams    (a certified L2 linear model, a DP-SGD model through Opacus, or a causal LM
                                      fine-tuned on QA: kind causal_lm_qa, settings in `language_model`)
  unlearning.unlearn  UnlearnParams  (a causal LM version: methods flat / npo / gradient_ascent, settings in
                                      `language_model`: LanguageModelParams)
  unlearning.audit    AuditParams    (output perturbation of a certified version, or the hidden-state
                                      canary audit of a DP-SGD training configuration)
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator

from services.common.params import JobParams, ModelName, params_json

if TYPE_CHECKING:
    from services.common.jobcontext import JobContext

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
UnitOpen = Annotated[float, Field(gt=0, lt=1)]

TRAIN_KINDS = ("logreg_l2", "softmax_l2", "ridge_l2", "dpsgd_softmax", "causal_lm_qa")
CONVEX_TRAIN_KINDS = ("logreg_l2", "softmax_l2", "ridge_l2")
UNLEARN_METHODS = ("certified_noisy_minimizer", "robust_certified", "noisy_finetune", "retrain", "finetune",
                   "gradient_ascent", "flat", "npo")
FLAT_DIVERGENCES = ("total_variation", "kl", "reverse_kl", "jeffrey", "squared_hellinger", "pearson", "neyman",
                    "jensen_shannon")
AUDIT_METHODS = ("output_perturbation", "hidden_state_canary")
# request field -> params field where the two differ
FIELD_PATHS = {"lr": "learning_rate"}


class DpSgdParams(JobParams):
    """DP-SGD through Opacus (kind dpsgd_softmax): per-sample clipping to max_grad_norm, Gaussian noise of
    std noise_multiplier * max_grad_norm on the summed clipped gradients, Poisson sampling at sample_rate, plain
    SGD (no momentum, no weight decay) for `steps` steps; the accountant gives epsilon at the job's delta."""

    model_config = JobParams.model_config

    noise_multiplier: PositiveFloat = 1.0
    max_grad_norm: PositiveFloat = 1.0
    steps: Annotated[int, Field(gt=0, le=100_000)] = 100
    sample_rate: Annotated[float, Field(gt=0, le=1)] = 0.1
    lr: PositiveFloat = 0.5
    accountant: Literal["rdp", "prv"] = "prv"


class LanguageModelParams(JobParams):
    """Fine-tuning / unlearning settings of a causal language model (services/unlearning/flat.py). None: the
    default of the job (learning_rate: unlearning 1e-4 LoRA / 1e-5 full, training 1e-3 LoRA / 1e-5 full;
    lora_dropout: unlearning 0.05, training 0)."""

    model_config = JobParams.model_config

    adaptation: Literal["lora", "full"] = "lora"
    lora_rank: Annotated[int, Field(gt=0, le=1024)] = 8
    lora_alpha: PositiveFloat = 32.0
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    epochs: Annotated[int, Field(gt=0, le=1000)] = 5
    learning_rate: Annotated[float, Field(gt=0, le=1)] | None = None
    batch_size: Annotated[int, Field(gt=0, le=4096)] = 16
    grad_accum: Annotated[int, Field(gt=0, le=1024)] = 1
    weight_decay: Annotated[float, Field(ge=0)] = 0.01
    divergence: Literal["total_variation", "kl", "reverse_kl", "jeffrey", "squared_hellinger", "pearson", "neyman",
                        "jensen_shannon"] = "total_variation"
    template_answers: Annotated[list[Annotated[str, Field(min_length=1, max_length=500)]],
                                Field(max_length=1000)] | None = None
    npo_beta: PositiveFloat = 0.1
    npo_retain_weight: Annotated[float, Field(ge=0)] = 1.0
    max_length: Annotated[int, Field(ge=0, le=1_000_000)] = 500
    checkpoint_every: Annotated[int, Field(gt=0)] = 1
    max_eval_records: Annotated[int, Field(gt=0)] = 64   # retain / held-out records the job's report evaluates


class TrainParams(JobParams):
    model_config = JobParams.model_config

    dataset_artifact_id: Annotated[str, Field(min_length=1)]
    kind: Literal["logreg_l2", "softmax_l2", "ridge_l2", "dpsgd_softmax", "causal_lm_qa"]
    name: ModelName = "unlearning-linear"
    mu: PositiveFloat | None = None         # required by the convex kinds (checked by require_mu)
    r: PositiveFloat = 1e-3
    epsilon: PositiveFloat = 1.0
    delta: UnitOpen = 1e-5
    seed: int = 0                           # robust training's minibatch order (DP-SGD: its sampling and noise
                                            # come from the OS CSPRNG, its initialisation is zeros)
    num_classes: Annotated[int, Field(ge=0)] = 0
    capacity: Annotated[int, Field(ge=0)] = 0
    trim_fraction: UnitOpen | None = None
    robust_noise_std: Annotated[float, Field(ge=0)] = 0.0
    robust_max_steps: PositiveInt = 1000
    max_steps: PositiveInt = 100_000
    checkpoint_every: PositiveInt = 50
    eval_dataset_artifact_id: str | None = None
    dpsgd: DpSgdParams | None = None
    base_model_version_id: str | None = None   # kind causal_lm_qa: the causal LM to fine-tune
    language_model: LanguageModelParams | None = None

    @field_validator("eval_dataset_artifact_id")
    @classmethod
    def _empty_is_none(cls, v: str | None) -> str | None:
        return v or None


class UnlearnParams(JobParams):
    model_config = JobParams.model_config

    model_version_id: Annotated[str, Field(min_length=1)]
    method: Literal["certified_noisy_minimizer", "robust_certified", "noisy_finetune", "retrain", "finetune",
                    "gradient_ascent", "flat", "npo"]
    forget_record_ids: list[str] | None = None
    forget_set_artifact_id: str | None = None
    record_id: str | None = None           # the unlearning record this job writes the outcome of
    epsilon: PositiveFloat | None = None   # None: the model's
    delta: UnitOpen | None = None
    seed: int = 0
    name: ModelName | None = None
    dataset_artifact_id: str | None = None
    eval_dataset_artifact_id: str | None = None
    mu: PositiveFloat | None = None        # for linear heads registered without one
    r: PositiveFloat | None = None
    max_steps: PositiveInt = 100_000
    checkpoint_every: PositiveInt = 50
    allow_retrain_fallback: bool = True
    # uncertified methods
    steps: PositiveInt = 200
    lr: PositiveFloat = 0.1
    batch_size: PositiveInt = 64
    noise_std: Annotated[float, Field(ge=0)] | None = None
    # causal language models (methods flat, npo, gradient_ascent)
    language_model: LanguageModelParams | None = None

    @field_validator("forget_set_artifact_id", "dataset_artifact_id", "eval_dataset_artifact_id", "name")
    @classmethod
    def _empty_is_none(cls, v):
        return v or None


class AuditParams(JobParams):
    model_config = JobParams.model_config

    model_version_id: Annotated[str, Field(min_length=1)]
    method: Literal["output_perturbation", "hidden_state_canary"] = "output_perturbation"
    runs: Annotated[int, Field(ge=20, le=100_000)] = 1000
    alpha: UnitOpen = 0.05
    seed: int = 0
    record_id: str | None = None
    original_model_version_id: str | None = None
    eval_dataset_artifact_id: str | None = None
    dataset_artifact_id: str | None = None
    max_steps: PositiveInt = 100_000
    checkpoint_every: PositiveInt = 50
    # hidden_state_canary: insert the crafted gradient every k-th step
    canary_every: Annotated[int, Field(ge=1)] = 1

    @field_validator("record_id", "original_model_version_id", "eval_dataset_artifact_id", "dataset_artifact_id")
    @classmethod
    def _empty_is_none(cls, v):
        return v or None


def require_mu(p: TrainParams) -> float:
    """The convex kinds need mu (their strong convexity); named as the request's field."""
    from services.common.errors import InvalidArgument

    if p.mu is None:
        raise InvalidArgument("mu", "required for kind " + p.kind + " (> 0: the L2 regularisation makes the loss "
                                    "strongly convex)")
    return p.mu


def fingerprint(ctx: JobContext, job: str) -> str:
    """What a checkpoint is valid for (run_steps' fingerprint): this job and these params. A state saved for other
    params (or another job) is never resumed into this request."""
    key = hashlib.sha256(json.dumps(params_json(ctx.params), sort_keys=True, default=str).encode()).hexdigest()
    return f"{job}:{key}"
