"""The recommendation service's long jobs, written against services.common.jobcontext.JobContext, and the loader
that turns a registered model back into a scoring object for the serving layer.

- run_import(ctx): raw CSV/Parquet artifact (or a builtin: ml-100k, synthetic) -> dataset artifact.
- run_training(ctx): dataset artifact -> trained, evaluated, registered model (preferdiff | dreamrec | sasrec_ce |
  popularity), with per-epoch progress, cancellation, checkpoints and deterministic resume.
- load_recommender(tensors, config) / Recommender.recommend(histories, k, exclude_seen): serving-side scoring.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext
from services.recommendation.data import (DATASET_CONTENT_TYPE, Dataset, build_dataset, load_movielens_100k,
                                          read_interactions, synthetic_interactions)
from kernels.topk_scores import topk_scores
from services.recommendation.model import MODEL_KINDS, ModelConfig, PreferDiff, build_model
from services.recommendation.training import Hooks, TrainConfig, train

MODEL_FORMAT = "praxon.recommendation.model/v1"
REGISTRY_KIND = "recommendation"
MAX_BATCH = 4096
_SYNTH_KEYS = {"n_users": int, "n_items": int, "n_clusters": int, "successors": int, "min_len": int, "max_len": int,
               "noise": float, "popularity_exponent": float, "synthetic_seed": int}


def _int_param(params: dict, name: str, default: int, lo: int, hi: int) -> int:
    v = params.get(name, default)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise InvalidArgument(f"params.{name}", f"must be an integer in {lo}..{hi}")
    return v


# --------------------------------------------------------------------------------------------------- import job
def run_import(ctx: JobContext) -> dict:
    """params: either {"artifact_id": <raw upload>, "format": "csv"|"parquet" (optional, sniffed)} or
    {"builtin": "ml-100k" | "synthetic", synthetic knobs: n_users, n_items, n_clusters, successors, min_len, max_len,
    noise, synthetic_seed}; plus "seed" (user split, default 0), "max_history" (default 10), "name".
    Returns {"dataset_artifact_id", n_users, n_items, n_interactions, n_train_users, ...}."""
    p = dict(ctx.params)
    seed = _int_param(p, "seed", 0, 0, 2 ** 31 - 1)
    max_history = _int_param(p, "max_history", 10, 1, 200)
    builtin, artifact_id = p.get("builtin"), p.get("artifact_id")
    if (builtin is None) == (artifact_id is None):
        raise InvalidArgument("params", "give exactly one of 'artifact_id' (an uploaded CSV/Parquet) or 'builtin'")
    ctx.progress(0.0, "reading interactions")
    if builtin is not None:
        if builtin == "ml-100k":
            df, source = load_movielens_100k(), "ml-100k"
        elif builtin == "synthetic":
            kw: dict[str, Any] = {}
            for k, typ in _SYNTH_KEYS.items():
                if k in p:
                    v = p[k]
                    ok = (isinstance(v, int) and not isinstance(v, bool)) if typ is int else \
                        (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= (1 if k == "noise" else 3))
                    if not ok:
                        raise InvalidArgument(f"params.{k}", "must be an integer" if typ is int else
                                              f"must be in [0, {1 if k == 'noise' else 3}]")
                    kw["seed" if k == "synthetic_seed" else k] = typ(v)
            if kw.get("n_users", 1000) * kw.get("max_len", 20) > 5_000_000:
                raise InvalidArgument("params.n_users", "the synthetic set would exceed 5M interactions")
            df, source = synthetic_interactions(**kw), "synthetic"
        else:
            raise InvalidArgument("params.builtin", "must be 'ml-100k' or 'synthetic'")
    else:
        if not isinstance(artifact_id, str):
            raise InvalidArgument("params.artifact_id", "must be an artifact id string")
        fmt = p.get("format")
        if fmt is not None and fmt not in ("csv", "tsv", "parquet"):
            raise InvalidArgument("params.format", "must be 'csv', 'tsv' or 'parquet'")
        df, source = read_interactions(ctx.read_artifact(artifact_id), fmt=fmt), f"artifact:{artifact_id}"
    ctx.check_cancelled()
    ctx.progress(0.5, "building sequences and split")
    ds = build_dataset(df, seed=seed, max_history=max_history, source=source)
    stats = ds.stats()
    name = p.get("name") or f"rec-dataset-{source.replace(':', '-')}"
    aid = ctx.write_artifact(str(name), ds.to_bytes(), DATASET_CONTENT_TYPE, metadata=stats)
    ctx.progress(1.0, "dataset written", n_users=float(stats["n_users"]), n_items=float(stats["n_items"]),
                 n_interactions=float(stats["n_interactions"]))
    return {"dataset_artifact_id": aid, **stats}


# ------------------------------------------------------------------------------------------------- training job
class _CtxHooks(Hooks):
    def __init__(self, ctx: JobContext):
        self.ctx = ctx

    def progress(self, fraction: float, message: str, **metrics: float) -> None:
        self.ctx.progress(min(max(fraction, 0.0), 1.0), message, **metrics)

    def check_cancelled(self) -> None:
        self.ctx.check_cancelled()

    def save_checkpoint(self, state: Any) -> None:
        self.ctx.save_checkpoint(state)

    def load_checkpoint(self) -> Any | None:
        return self.ctx.load_checkpoint()


def _metric_key(name: str) -> str:
    return name.replace("@", "_")


def run_training(ctx: JobContext) -> dict:
    """params: dataset_artifact_id (required), model_kind (preferdiff | dreamrec | sasrec_ce | popularity),
    model_name (default "rec-<kind>"), and TrainConfig hyper-parameters (epochs, batch_size, lr, lam, gamma,
    guidance_w, dim, seed, patience, max_history, exclude_history, ...). Returns the registered model's id/version
    and its test Recall/NDCG@{5,10,20}."""
    p = dict(ctx.params)
    aid = p.get("dataset_artifact_id")
    if not isinstance(aid, str) or not aid:
        raise InvalidArgument("params.dataset_artifact_id", "required: the id of an imported dataset artifact")
    name = p.get("model_name", f"rec-{p.get('model_kind', 'preferdiff')}")
    if not isinstance(name, str) or not name or len(name) > 128:
        raise InvalidArgument("params.model_name", "a non-empty name of at most 128 characters")
    cfg = TrainConfig.from_params(p, ignore=("dataset_artifact_id", "model_name"))
    dataset = Dataset.from_bytes(ctx.read_artifact(aid), field="params.dataset_artifact_id")
    result = train(cfg, dataset, _CtxHooks(ctx))

    metrics = {f"test_{_metric_key(k)}": v for k, v in result.test_metrics.items()}
    metrics.update({f"valid_{_metric_key(k)}": v for k, v in result.valid_metrics.items()})
    metrics["best_epoch"] = float(result.best_epoch)
    metrics["epochs_run"] = float(result.epochs_run)
    tensors = {"popularity": result.popularity.clone()}
    if result.model is not None:
        tensors.update({f"model.{k}": v.detach().clone() for k, v in result.model.state_dict().items()})
    mcfg = result.model_config.to_dict() if result.model_config else {
        "kind": "popularity", "n_items": dataset.n_items, "max_history": cfg.max_history or dataset.max_history}
    config = {"format": MODEL_FORMAT, "model_kind": cfg.model_kind, "model": mcfg, "item_ids": dataset.item_ids,
              "seed": cfg.seed, "exclude_history_in_eval": cfg.exclude_history, "train": asdict(cfg)}
    info = ctx.register_model(name, tensors, kind=REGISTRY_KIND, config=config, metrics=metrics,
                              dataset_artifact_id=aid)
    ctx.progress(1.0, "model registered", **{k: v for k, v in metrics.items() if k.startswith("test_")})
    return {"model_version_id": info.model_version_id, "model_name": info.name, "version": info.version,
            "model_kind": cfg.model_kind, "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
            "metrics": metrics}


# ------------------------------------------------------------------------------------------------------ serving
@dataclass
class Recommendations:
    """Per input history: k (score, item) pairs, best first. Slots that could not be filled (fewer than k items
    left after excluding the history) have score -inf and id None / index -1."""

    scores: torch.Tensor  # [B, k] float32
    ids: list[list[str | None]]  # raw item ids (as imported, strings)
    item_indices: torch.Tensor  # [B, k] int64, internal 1..N, -1 = empty slot
    fallback: list[str | None]  # why a row was scored by popularity ("empty history", ...), else None
    unknown_items: list[list[str]]  # history ids not in the model's catalogue (ignored)


class Recommender:
    """A registered recommendation model ready to score new, unseen histories."""

    def __init__(self, kind: str, model: torch.nn.Module | None, model_config: ModelConfig | None,
                 popularity: torch.Tensor, item_ids: list[str], seed: int = 0):
        self.kind = kind
        self.model = model
        self.model_config = model_config
        self.popularity = popularity.to(torch.float32)
        self.item_ids = item_ids
        self.index_of = {r: i + 1 for i, r in enumerate(item_ids)}
        self.seed = seed
        self.max_history = model_config.max_history if model_config else 10
        if model is not None:
            model.eval()

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    def _noise(self, b: int, d: int) -> torch.Tensor:
        # One starting noise vector shared by every row: the same history always gets the same list,
        # whatever else is in the batch.
        g = torch.Generator().manual_seed(self.seed)
        return torch.randn(d, generator=g).expand(b, d).contiguous()

    @torch.no_grad()
    def _model_queries(self, hist: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        if isinstance(self.model, PreferDiff):
            h = self.model.encoder(hist, lens)
            return self.model.sample(h, x_T=self._noise(h.shape[0], h.shape[1]))
        return self.model.queries(hist, lens)

    @torch.no_grad()
    def recommend(self, histories: Sequence[Sequence[int | str]], k: int = 10,
                  exclude_seen: bool = True) -> Recommendations:
        """histories: raw item ids (as in the imported data), oldest first. Unknown ids are ignored and reported;
        a history with no known item falls back to popularity (reported in `fallback`)."""
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= self.n_items:
            raise InvalidArgument("k", f"must be an integer in 1..{self.n_items} (the catalogue size)")
        if not isinstance(histories, (list, tuple)) or len(histories) > MAX_BATCH:
            raise InvalidArgument("histories", f"a list of at most {MAX_BATCH} histories")
        B = len(histories)
        known: list[list[int]] = []
        unknown: list[list[str]] = []
        for bi, hist in enumerate(histories):
            if not isinstance(hist, (list, tuple)):
                raise InvalidArgument(f"histories[{bi}]", "must be a list of item ids")
            ks_, us_ = [], []
            for it in hist:
                if isinstance(it, bool) or not isinstance(it, (int, str)):
                    raise InvalidArgument(f"histories[{bi}]", "item ids must be integers or strings")
                idx = self.index_of.get(str(it))
                if idx is None:
                    us_.append(str(it))
                else:
                    ks_.append(idx)
            known.append(ks_)
            unknown.append(us_)
        fallback: list[str | None] = [None] * B
        for bi in range(B):
            if self.model is None:
                fallback[bi] = "popularity model"
            elif not known[bi]:
                fallback[bi] = "empty history: popularity" if not histories[bi] else \
                    "no known items in history: popularity"
        scores = torch.full((B, k), float("-inf"))
        idxs = torch.full((B, k), -1, dtype=torch.long)

        def exclusion(rows: list[int]) -> torch.Tensor | None:
            if not exclude_seen:
                return None
            width = max([len(known[r]) for r in rows] + [1])
            ex = torch.full((len(rows), width), -1, dtype=torch.long)
            for j, r in enumerate(rows):
                ex[j] = _pad(sorted(set(known[r])), width)
            return ex

        pop_rows = [r for r in range(B) if fallback[r] is not None]
        model_rows = [r for r in range(B) if fallback[r] is None]
        if pop_rows:
            s, i = topk_scores(torch.ones(len(pop_rows), 1), self.popularity[1:].unsqueeze(1), k,
                               exclusion(pop_rows))
            scores[pop_rows], idxs[pop_rows] = s, torch.where(i >= 0, i + 1, i)
        if model_rows:
            L = self.max_history
            hist = torch.zeros(len(model_rows), L, dtype=torch.long)
            lens = torch.zeros(len(model_rows), dtype=torch.long)
            for j, r in enumerate(model_rows):
                h = known[r][-L:]
                hist[j, :len(h)] = torch.tensor(h, dtype=torch.long)
                lens[j] = len(h)
            q = self._model_queries(hist, lens)
            table = self.model.item_table().detach()
            s, i = topk_scores(q.to(table.dtype), table, k, exclusion(model_rows))
            scores[model_rows], idxs[model_rows] = s, torch.where(i >= 0, i + 1, i)
        ids = [[self.item_ids[int(j) - 1] if j > 0 else None for j in row] for row in idxs.tolist()]
        return Recommendations(scores=scores, ids=ids, item_indices=idxs, fallback=fallback, unknown_items=unknown)


def _pad(items_1based: list[int], width: int) -> torch.Tensor:
    out = torch.full((width,), -1, dtype=torch.long)
    if items_1based:
        out[:len(items_1based)] = torch.tensor(items_1based, dtype=torch.long) - 1
    return out


def load_recommender(tensors: dict[str, torch.Tensor], config: dict[str, Any],
                     field: str = "model_version_id") -> Recommender:
    """(tensors, config) as registered by run_training (e.g. from ctx.load_model / the registry) -> Recommender."""
    if not isinstance(config, dict) or config.get("format") != MODEL_FORMAT:
        raise InvalidArgument(field, "not a recommendation model registered by praxon")
    kind = config.get("model_kind")
    if kind not in MODEL_KINDS:
        raise InvalidArgument(field, f"unknown recommendation model kind {kind!r}")
    item_ids = [str(x) for x in config["item_ids"]]
    pop = tensors.get("popularity")
    if pop is None or pop.shape != (len(item_ids) + 1,):
        raise InvalidArgument(field, "model tensors lack a popularity vector matching the catalogue")
    if kind == "popularity":
        return Recommender(kind, None, None, pop, item_ids, seed=int(config.get("seed", 0)))
    mcfg = ModelConfig.from_dict(config["model"])
    model = build_model(mcfg)
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise InvalidArgument(field, f"model tensors do not match the config (missing {len(missing)}, "
                                     f"unexpected {len(unexpected)})")
    return Recommender(kind, model, mcfg, pop, item_ids, seed=int(config.get("seed", 0)))


def load_registered(ctx: JobContext, model_version_id: str) -> Recommender:
    tensors, config = ctx.load_model(model_version_id)
    return load_recommender(tensors, config)


__all__ = ["run_import", "run_training", "load_recommender", "load_registered", "Recommender", "Recommendations"]
