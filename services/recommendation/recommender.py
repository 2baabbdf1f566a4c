"""The recommendation engine: a registered model turned back into a scoring object, used alike by the gRPC servicer
(through serving.py's cache and batcher), the kserve predictor and the benchmarks, so their answers agree by
construction. No grpc and no job code here.

- load_recommender(tensors, config) -> Recommender: (weights, config) as the training job registered them.
- Recommender.recommend(histories, k, exclude_seen) -> Recommendations: top-k over the whole catalogue for new,
  unseen histories (raw item ids, oldest first); unknown ids are ignored and reported, an empty history falls back
  to popularity; PreferDiff samples from one fixed starting noise so a history always gets the same list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from kernels.topk_scores import topk_scores
from services.common.errors import InvalidArgument
from services.recommendation.model import MODEL_KINDS, ModelConfig, PreferDiff, build_model

MODEL_FORMAT = "praxon.recommendation.model/v1"
REGISTRY_KIND = "recommendation"
MAX_BATCH = 4096


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


__all__ = ["MODEL_FORMAT", "REGISTRY_KIND", "Recommender", "Recommendations", "load_recommender"]
