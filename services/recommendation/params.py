"""Typed parameters of the recommendation jobs: one pydantic model per job kind, validated with
services.common.params.parse_params by the servicer (from the request, with the request's field paths) and by the
job (from ctx.params, prefix "params."). Light: no torch here, so the servicer validates without loading torch.

Training defaults depend on the model kind (filled in before validation, only for fields the caller left out):
- preferdiff / dreamrec: the official PreferDiff trainer (lswhim/PreferDiff: README command line, best-hyper-parameter
  table, trainer.py): embedding size 3072, 1 encoder layer, 2 heads, dropout 0.1, AdamW lr 1e-4, weight decay 0, no
  LR schedule, no gradient clipping, batch 256, up to 150 epochs, patience 10 on validation Recall@5, w = 2,
  lambda 0.4, gamma 5, one training sample per user ("last"). DreamRec is lambda = 1 with the MSE error (its own
  objective); `loss_type="cosine"` with dreamrec is the paper's cosine ablation (PreferDiff without the preference
  term).
- sasrec_ce / gru4rec: RecBole 1.2.1's defaults: Adam lr 1e-3, batch 2048, up to 300 epochs, early stopping after 10
  epochs without a better validation NDCG@10, every next item a training sample; SASRec 64-d, 2 layers, 2 heads,
  FFN 256, dropout 0.5, GELU; GRU4Rec 64-d embeddings, GRU hidden 128, 1 layer, embedding dropout 0.3."""
from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from services.common.params import JobParams, ModelName

MODEL_KINDS = ("preferdiff", "dreamrec", "sasrec_ce", "gru4rec", "popularity")
PROTOCOLS = ("user_split", "leave_one_out")
METRICS = tuple(f"{mask}{m}@{k}" for mask in ("", "masked_") for m in ("recall", "ndcg") for k in (5, 10, 20))
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)

_DIFFUSION = dict(dim=3072, layers=1, heads=2, dropout=0.1, lr=1e-4, weight_decay=0.0, batch_size=256, epochs=150,
                  patience=10, early_stop_metric="recall@5", optimizer="adamw", train_samples="last",
                  guidance_w=2.0, lam=0.4, gamma=5.0, loss_type="cosine")
_RECBOLE = dict(dim=64, lr=1e-3, weight_decay=0.0, batch_size=2048, epochs=300, patience=10,
                early_stop_metric="ndcg@10", optimizer="adam", train_samples="every_prefix")
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "preferdiff": _DIFFUSION,
    "dreamrec": {**_DIFFUSION, "lam": 1.0, "loss_type": "mse"},
    "sasrec_ce": {**_RECBOLE, "layers": 2, "heads": 2, "dropout": 0.5, "inner": 256},
    "gru4rec": {**_RECBOLE, "layers": 1, "heads": 1, "dropout": 0.3, "inner": 128},
    "popularity": {},
}


class SyntheticParams(JobParams):
    """Knobs of the planted-transition generator (services.recommendation.data.synthetic_interactions)."""

    model_config = _STRICT
    n_users: int = Field(1000, ge=10, le=1_000_000)
    n_items: int = Field(200, ge=2, le=1_000_000)
    n_clusters: int = Field(10, ge=1, le=100_000)
    successors: int = Field(3, ge=1, le=1000)
    min_len: int = Field(6, ge=2, le=10_000)
    max_len: int = Field(20, ge=2, le=10_000)
    noise: float = Field(0.1, ge=0.0, le=1.0)
    popularity_exponent: float = Field(0.8, ge=0.0, le=3.0)
    synthetic_seed: int = Field(0, ge=0, le=2 ** 31 - 1)

    @field_validator("max_len")
    @classmethod
    def _lengths(cls, v: int, info) -> int:
        if v < info.data.get("min_len", 2):
            raise ValueError("must be >= min_len")
        return v

    @model_validator(mode="after")
    def _size(self) -> "SyntheticParams":
        if self.n_items < 2 * self.successors:
            raise ValueError("n_items must be >= 2 * successors")
        if self.n_users * self.max_len > 5_000_000:
            raise ValueError("the synthetic set would exceed 5M interactions (n_users * max_len)")
        return self


class ImportParams(JobParams):
    """recommendation.import: exactly one of artifact_id (an uploaded CSV/TSV/Parquet) or builtin."""

    model_config = _STRICT
    artifact_id: str | None = None
    format: Literal["csv", "tsv", "parquet"] | None = None
    builtin: Literal["ml-100k", "synthetic"] | None = None
    synthetic: SyntheticParams | None = None
    protocol: Literal["user_split", "leave_one_out"] = "user_split"
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)
    max_history: int = Field(10, ge=1, le=200)
    name: str | None = Field(None, min_length=1, max_length=512)

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        if v is not None and not v.isprintable():
            raise ValueError("printable characters only")
        return v

    @model_validator(mode="after")
    def _source(self) -> "ImportParams":
        if (self.builtin is None) == (self.artifact_id is None):
            raise ValueError("give exactly one of 'artifact_id' (an uploaded CSV/Parquet) or 'builtin'")
        if self.synthetic is not None and self.builtin != "synthetic":
            raise ValueError("synthetic options only with builtin 'synthetic'")
        return self


class TrainParams(JobParams):
    """recommendation.train (and the configuration the training loop runs on). Fields left out take the model
    kind's defaults (KIND_DEFAULTS), so `TrainParams(model_kind="sasrec_ce")` is RecBole's SASRec."""

    model_config = _STRICT
    dataset_artifact_id: str | None = None
    model_name: ModelName | None = None
    model_kind: Literal["preferdiff", "dreamrec", "sasrec_ce", "gru4rec", "popularity"] = "preferdiff"
    epochs: int = Field(150, ge=1, le=10_000)
    batch_size: int = Field(256, ge=2, le=65_536)
    optimizer: Literal["adamw", "adam"] = "adamw"
    lr: float = Field(1e-4, gt=0.0, le=1.0)
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    max_grad_norm: float = Field(0.0, ge=0.0)  # 0: no clipping (the official trainer defines max_grad_norm, never clips)
    heads: int = Field(2, ge=1, le=64)
    dim: int = Field(3072, ge=2, le=4096)
    layers: int = Field(1, ge=1, le=12)
    inner: int = Field(256, ge=1, le=16_384)  # SASRec feed-forward width / GRU4Rec hidden size
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    emb_init_std: float = Field(0.0, ge=0.0, le=10.0)  # 0: the kind's own initialisation
    lam: float = Field(0.4, ge=0.0, le=1.0)
    gamma: float = Field(5.0, gt=0.0, le=100.0)
    loss_type: Literal["cosine", "mse"] = "cosine"
    p_null: float = Field(0.1, ge=0.0, lt=1.0)
    guidance_w: float = Field(2.0, ge=0.0, le=50.0)
    timesteps: int = Field(2000, ge=10, le=10_000)
    sample_steps: int = Field(20, ge=1, le=10_000)
    train_samples: Literal["every_prefix", "last"] = "last"
    early_stop_metric: str = "recall@5"
    patience: int = Field(10, ge=1, le=10_000)
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)
    max_history: int = Field(0, ge=0, le=200)  # 0: the dataset's
    eval_batch_size: int = Field(1024, ge=1, le=65_536)
    cancel_check_every: int = Field(50, ge=1)  # batches
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = data.get("model_kind", "preferdiff")
            defaults = KIND_DEFAULTS.get(kind, {}) if isinstance(kind, str) else {}
            data = {**defaults, **data}
        return data

    @field_validator("dim")
    @classmethod
    def _dim(cls, v: int, info) -> int:
        heads = info.data.get("heads")
        if heads and v % heads:
            raise ValueError(f"must be divisible by heads ({heads})")
        return v

    @field_validator("lam")
    @classmethod
    def _lam(cls, v: float, info) -> float:
        if info.data.get("model_kind") == "dreamrec" and v != 1.0:
            raise ValueError("DreamRec is lam = 1 (no preference term); use model_kind preferdiff for other values")
        return v

    @field_validator("loss_type")
    @classmethod
    def _loss(cls, v: str, info) -> str:
        if v == "mse" and info.data.get("lam", 1.0) != 1.0:
            raise ValueError("mse is DreamRec's objective (lam = 1); the preference loss is defined on the cosine "
                             "error")
        return v

    @field_validator("sample_steps")
    @classmethod
    def _steps(cls, v: int, info) -> int:
        if v > info.data.get("timesteps", 10_000):
            raise ValueError("must be <= timesteps")
        return v

    @field_validator("early_stop_metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(f"one of {', '.join(METRICS)}")
        return v

    def training_fields(self) -> dict[str, Any]:
        """The hyper-parameters alone (what a checkpoint must agree with)."""
        return self.model_dump(exclude={"dataset_artifact_id", "model_name", "cancel_check_every",
                                        "eval_batch_size", "device"})


class SweepParams(JobParams):
    """recommendation.sweep: train `base` once per point of the grid (the product of the listed values) and report
    the table; the grid keys are training fields (typically dim, lam, guidance_w, lr)."""

    model_config = _STRICT
    dataset_artifact_id: str
    base: dict[str, Any] = Field(default_factory=dict)
    max_runs: int = Field(64, ge=1, le=1024)  # before grid: the grid's validator reads it
    grid: dict[str, list[Any]] = Field(min_length=1)
    metric: str = "ndcg@10"

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: dict[str, list[Any]], info: ValidationInfo) -> dict[str, list[Any]]:
        n = 1
        for key, values in v.items():
            if key not in TrainParams.model_fields or key in ("dataset_artifact_id", "model_name"):
                raise ValueError(f"{key!r} is not a training parameter")
            if not values:
                raise ValueError(f"{key!r} needs at least one value")
            n *= len(values)
        limit = info.data.get("max_runs", 64)
        if n > limit:  # refused, never cut short silently
            raise ValueError(f"{n} grid points: at most {limit} (max_runs)")
        return v

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(f"one of {', '.join(METRICS)}")
        return v


def grid_points(p: SweepParams) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in the grid's key order (the last key varies fastest)."""
    keys = list(p.grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(p.grid[k] for k in keys))]
