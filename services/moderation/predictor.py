"""The guard as a kserve.Model (Open Inference Protocol v2), for KServe InferenceServices and `praxon predictor
moderation --tenant T --model guard@production`.

Inputs:   "text"  BYTES [N]  UTF-8 texts (required)
          "role"  BYTES [N]  "prompt" | "response" (optional; default "prompt")
Outputs:  "unsafe_score"  FP64  [N]      P(unsafe), max over the text's sentence windows
          "topic_scores"  FP64  [N, 11]  P(topic) for S1..S11, max over windows
          "severity"      INT32 [N, 11]  severity level 0..4 per topic (0 when the topic is absent)
          "blocked"       BOOL  [N]      decision under the tenant's thresholds at load time
Response parameters: model_version (the fingerprint), model_version_id; output "topic_scores" carries the topic
ids in its "topics" parameter. The numbers equal ModerationService.Moderate's for the same model and thresholds."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from services.common.errors import InvalidArgument
from services.moderation.decision import Thresholds, moderate_batch
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.serving import VersionInfo
from services.moderation.taxonomy import N_TOPICS, ROLES, TOPICS

MAX_ITEMS = 1024


def _strings(inp, name: str, n: int | None = None) -> list[str]:
    if inp.datatype != "BYTES":
        raise InvalidInput(f"input {name!r} must be BYTES, got {inp.datatype}")
    arr = np.asarray(inp.as_numpy(), dtype=object).reshape(-1)
    if n is not None and len(arr) != n:
        raise InvalidInput(f"input {name!r} has {len(arr)} elements, expected {n}")
    out = []
    for i, v in enumerate(arr):
        if isinstance(v, (bytes, bytearray, np.bytes_)):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidInput(f"{name}[{i}] is not valid UTF-8 (byte {e.start})") from None
        elif not isinstance(v, str):
            raise InvalidInput(f"{name}[{i}] must be a string")
        out.append(v)
    return out


class GuardPredictor(Model):
    """Serves one guard version. `loader()` -> (GuardModel, VersionInfo, Thresholds) runs in load()."""

    def __init__(self, name: str, *, loader: Callable[[], tuple[Any, VersionInfo, Thresholds]] | None = None,
                 guard: Any = None, info: VersionInfo | None = None, thresholds: Thresholds | None = None):
        super().__init__(name)
        self._loader = loader
        self.guard, self.info, self.thresholds = guard, info, thresholds or Thresholds()
        self.ready = guard is not None

    def load(self) -> bool:
        if self.guard is None:
            self.guard, self.info, self.thresholds = self._loader()
        self.ready = True
        return self.ready

    def parse(self, payload: InferRequest) -> tuple[list[str], list[str]]:
        if not isinstance(payload, InferRequest):
            raise InvalidInput("expected an Open Inference Protocol v2 request")
        text_in = payload.get_input_by_name("text")
        if text_in is None:
            raise InvalidInput("input 'text' (BYTES [N]) is required")
        texts = _strings(text_in, "text")
        if not texts:
            raise InvalidInput("input 'text' is empty")
        if len(texts) > MAX_ITEMS:
            raise InvalidInput(f"at most {MAX_ITEMS} texts per request")
        for i, t in enumerate(texts):
            if not t.strip():
                raise InvalidInput(f"text[{i}] is empty")
            if len(t) > MAX_TEXT_CHARS:
                raise InvalidInput(f"text[{i}] is longer than {MAX_TEXT_CHARS} characters")
        role_in = payload.get_input_by_name("role")
        roles = _strings(role_in, "role", len(texts)) if role_in is not None else ["prompt"] * len(texts)
        for i, r in enumerate(roles):
            if r not in ROLES:
                raise InvalidInput(f"role[{i}] must be one of {list(ROLES)}")
        return texts, roles

    def infer(self, texts: list[str], roles: list[str]) -> dict[str, np.ndarray]:
        try:
            results = moderate_batch(self.guard, texts, roles, self.thresholds)
        except InvalidArgument as exc:  # validated above; kept as a client error all the same
            raise InvalidInput(exc.message) from None
        return {"unsafe_score": np.array([r.unsafe_score for r in results], dtype=np.float64),
                "topic_scores": np.array([[t.score for t in r.topics] for r in results], dtype=np.float64),
                "severity": np.array([[t.severity for t in r.topics] for r in results], dtype=np.int32),
                "blocked": np.array([r.blocked for r in results], dtype=bool)}

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse:
        if not self.ready:
            self.load()
        texts, roles = self.parse(payload)
        out = await asyncio.to_thread(self.infer, texts, roles)
        n = len(texts)
        outputs = []
        for name, dtype, shape in (("unsafe_score", "FP64", [n]), ("topic_scores", "FP64", [n, N_TOPICS]),
                                   ("severity", "INT32", [n, N_TOPICS]), ("blocked", "BOOL", [n])):
            o = InferOutput(name=name, shape=shape, datatype=dtype,
                            parameters={"topics": ",".join(TOPICS)} if name != "unsafe_score" and
                            name != "blocked" else None)
            o.set_data_from_numpy(out[name], binary_data=False)
            outputs.append(o)
        params = {"model_version": self.guard.version}
        if self.info is not None:
            params.update(model_version_id=self.info.model_version_id, registry_version=str(self.info.version))
        return InferResponse(response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                             infer_outputs=outputs, model_version=self.guard.version, parameters=params)


def build(settings, tenant_id: str, model_ref: str) -> GuardPredictor:
    """PREDICTORS["moderation"]: a loaded predictor for a registered guard ("name", "name:3" or "name@alias"; the
    default alias "production", else the latest version), with the tenant's thresholds at load time."""
    from services.common.serving import RefKey, parse_model_ref  # noqa: PLC0415
    from services.moderation.serving import ServingConfig  # noqa: PLC0415

    config = ServingConfig()
    name, version, alias = parse_model_ref(model_ref, config.default_guard)

    def loader():
        from services.common import db  # noqa: PLC0415
        from services.common.registry import Registry  # noqa: PLC0415
        from services.common.serving import ModelCache  # noqa: PLC0415
        from services.common.store import ArtifactStore  # noqa: PLC0415
        from services.moderation.policy_store import ModerationStore  # noqa: PLC0415
        from services.moderation.serving import build_guard  # noqa: PLC0415

        pool = db.create_pool(settings, max_size=2)
        try:
            registry = Registry(pool, ArtifactStore(settings))
            loaded = ModelCache(registry, build_guard, config, what="guard model").load_now(
                RefKey(tenant_id, name, version, alias))
            thresholds = ModerationStore(pool).get_thresholds(tenant_id).thresholds
        finally:
            pool.close()
        return loaded.obj, loaded.info, thresholds

    predictor = GuardPredictor("moderation", loader=loader)
    predictor.load()  # ModelServer.start() only serves models that are ready
    return predictor
