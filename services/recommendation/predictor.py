"""The scoring step as a kserve.Model (Open Inference Protocol v2), for KServe InferenceServices and
`praxon predictor recommendation --tenant T --model recommender@production`.

Inputs:   "history"       INT64 [B, L]  catalogue indices 1..N, oldest first, right-padded with 0 (required;
                                        a row of zeros is an empty history: popularity fallback)
          "k"             INT32 [1]     items per row, 1..N (optional; default 10)
          "exclude_seen"  BOOL  [1]     leave the history's items out of the ranking (optional; default false)
Outputs:  "item_index"    INT64 [B, k]  catalogue indices, best first; -1 in slots left empty by exclusion
          "score"         FP32  [B, k]  scores; -inf in empty slots
          "item_id"       BYTES [B, k]  raw item ids as imported; "" in empty slots
          "fallback"      BOOL  [B]     the row was scored by popularity (empty history or popularity model)
Response parameters: model_name, registry_version, model_version_id, model_kind, catalogue_size.
The numbers equal RecommendationService.Recommend's (and the engine's, recommender.Recommender) for the same model.
Built from the registry (`build`), the predictor serves through the same ModelCache as the servicer, so it follows
alias moves the same way: a request after the alias moved (and the cache's alias_check_s passed) is answered by the
new version, loaded in the background while the old one keeps answering."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import numpy as np
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from services.common import oip
from services.common.oip import TensorSpec

from services.recommendation.serving import Loaded, ServingConfig, rows_from

MAX_ROWS = 1024
MAX_HISTORY = 1000


def _scalar(payload: InferRequest, name: str, datatypes: tuple[str, ...], default):
    inp = payload.get_input_by_name(name)
    if inp is None:
        return default
    if inp.datatype not in datatypes:
        raise InvalidInput(f"input {name!r} must be {' or '.join(datatypes)}, got {inp.datatype}")
    arr = np.asarray(oip.array(inp, name)).reshape(-1)
    if arr.size != 1:
        raise InvalidInput(f"input {name!r} must hold one value, got {arr.size}")
    return arr[0].item()


class RecommendationPredictor(oip.DeclaredModel):
    """Serves a recommendation model: a fixed version (`loaded`), or whatever `current()` (an async callable, e.g.
    a ModelCache lookup of name@alias) returns at each request. `loader()` -> Loaded runs in load()."""

    def __init__(self, name: str, *, loader: Callable[[], Loaded] | None = None, loaded: Loaded | None = None,
                 current: Callable[[], Awaitable[Loaded]] | None = None):
        super().__init__(name)
        self._loader = loader
        self._current = current
        self.loaded = loaded
        self.ready = loaded is not None

    def load(self) -> bool:
        if self.loaded is None:
            self.loaded = self._loader()
        self.ready = True
        return self.ready

    def parse(self, payload: InferRequest, loaded: Loaded | None = None) -> tuple[list[list[str]], int, bool]:
        if not isinstance(payload, InferRequest):
            raise InvalidInput("expected an Open Inference Protocol v2 request")
        rec = (loaded or self.loaded).rec
        self.check_inputs(payload)  # declared names, datatypes and shapes: history INT64 [B, L], k INT32 [1], ...
        inp = payload.get_input_by_name("history")
        arr = np.asarray(oip.array(inp, "history"))
        if arr.ndim != 2 or arr.shape[0] < 1:
            raise InvalidInput(f"input 'history' must be [B, L] with B >= 1, got shape {list(arr.shape)}")
        if arr.shape[0] > MAX_ROWS:
            raise InvalidInput(f"at most {MAX_ROWS} histories per request")
        if arr.shape[1] > MAX_HISTORY:
            raise InvalidInput(f"histories of at most {MAX_HISTORY} items")
        n = rec.n_items
        bad = np.argwhere((arr < 0) | (arr > n))
        if bad.size:
            b, j = bad[0]
            raise InvalidInput(f"history[{b}][{j}] = {arr[b, j]} is outside the catalogue 1..{n} (0 pads)")
        k = _scalar(payload, "k", ("INT32",), 10)
        if not 1 <= int(k) <= n:
            raise InvalidInput(f"k must be in 1..{n} (the catalogue size)")
        exclude = _scalar(payload, "exclude_seen", ("BOOL",), False)
        ids = rec.item_ids
        histories = [[ids[x - 1] for x in row.tolist() if x > 0] for row in arr]
        return histories, int(k), bool(exclude)

    def infer(self, histories: list[list[str]], k: int, exclude_seen: bool,
              loaded: Loaded | None = None) -> dict[str, np.ndarray]:
        rows = rows_from((loaded or self.loaded).rec, histories, [k] * len(histories), exclude_seen)
        b = len(rows)
        idx = np.full((b, k), -1, dtype=np.int64)
        score = np.full((b, k), -np.inf, dtype=np.float32)
        item = np.full((b, k), b"", dtype=object)
        for r, row in enumerate(rows):
            n = len(row.indices)
            idx[r, :n] = row.indices
            score[r, :n] = row.scores
            item[r, :n] = [i.encode() for i in row.ids]
        return {"item_index": idx, "score": score, "item_id": item,
                "fallback": np.array([row.scored_by != "model" for row in rows], dtype=bool)}

    INPUTS = (TensorSpec("history", "INT64", (-1, -1)),
              TensorSpec("k", "INT32", (1,), optional=True),
              TensorSpec("exclude_seen", "BOOL", (1,), optional=True))
    OUTPUTS = (TensorSpec("item_index", "INT64", (-1, -1)),
              TensorSpec("score", "FP32", (-1, -1)),
              TensorSpec("item_id", "BYTES", (-1, -1)),
              TensorSpec("fallback", "BOOL", (-1,)))

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse:
        if not self.ready:
            self.load()
        loaded = self.loaded
        if self._current is not None:
            loaded = self.loaded = await self._current()  # follows the alias (hot swap in the background)
        histories, k, exclude = self.parse(payload, loaded)
        out = await asyncio.to_thread(self.infer, histories, k, exclude, loaded)
        b = len(histories)
        outputs = []
        for name, dtype, shape in (("item_index", "INT64", [b, k]), ("score", "FP32", [b, k]),
                                   ("item_id", "BYTES", [b, k]), ("fallback", "BOOL", [b])):
            o = InferOutput(name=name, shape=shape, datatype=dtype)
            o.set_data_from_numpy(out[name], binary_data=False)
            outputs.append(o)
        i = loaded.info
        params = {"model_name": i.name, "registry_version": str(i.version), "model_version_id": i.model_version_id,
                  "model_kind": i.model_kind, "catalogue_size": str(i.catalogue_size)}
        return oip.response(payload, response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                             infer_outputs=outputs, model_version=str(i.version), parameters=params)


def build(settings, tenant_id: str, model_ref: str) -> RecommendationPredictor:
    """PREDICTORS["recommendation"]: a predictor for a registered model ("name", "name:3" or "name@alias"; the
    default alias "production", else the latest version), loaded from the registry now; a reference without a
    version keeps following its alias (the servicer's ModelCache, over a registry connection the predictor keeps)."""
    from services.common import db
    from services.common.registry import Registry
    from services.common.serving import ModelCache, RefKey, parse_model_ref
    from services.common.spec import service_settings
    from services.common.store import ArtifactStore
    from services.recommendation.serving import build_loaded

    config = service_settings(settings, "recommendation", ServingConfig)
    name, version, alias = parse_model_ref(model_ref, config.default_model)
    key = RefKey(tenant_id, name, version, alias)
    pool = db.create_pool(settings, max_size=2)
    cache = ModelCache(Registry(pool, ArtifactStore(settings)), build_loaded, config, what="recommendation model")
    first = cache.warm(key)  # the first get() serves this version, not a second load of it

    async def current() -> Loaded:
        return await cache.get(key)

    predictor = RecommendationPredictor("recommendation", loaded=first, current=None if version else current)
    predictor.pool = pool  # kept open for the predictor's lifetime (alias checks, new versions)
    # Loaded here: kserve's ModelServer.start() refuses models that are not ready (NoModelReady), and
    # services/cli/serve.py run_predictor hands the model over as built.
    return predictor
