"""The guard (or the distilled student) as a kserve.Model (Open Inference Protocol v2), for KServe
InferenceServices and `praxon predictor moderation --tenant T --model guard@production`.

Inputs:   "text"    BYTES [N]  UTF-8 texts (required; the servicer's limits: N <= max_batch_items, each text
                               <= max_text_bytes and MAX_TEXT_CHARS, checked by ModerationEngine.check_item)
          "role"    BYTES [N]  "prompt" | "response" (optional; default "prompt")
          "prompt"  BYTES [N]  for a response: the prompt it answers ("" = none); optional
Outputs:  "unsafe_score"  FP64  [N]      P(unsafe), max over the text's chunks
          "topic_scores"  FP64  [N, 11]  P(topic) for S1..S11, max over chunks
          "severity"      INT32 [N, 11]  severity level 0..4 per topic (0 when the topic is absent)
          "blocked"       BOOL  [N]      decision under the tenant's thresholds now (cached <= thresholds_ttl_s)
Response parameters: model_version (the fingerprint), model_version_id, registry_version, model_kind; output
"topic_scores" carries the topic ids in its "topics" parameter.

Request parameters (optional), what ModerateRequest's fields of the same names ask of the servicer:
          "policy_ids"        string  comma-separated custom policies of the tenant -> output "policy_verdicts"
                                      BYTES [N]: per text a JSON list of {policy_id, policy_version, chunk_id,
                                      violated, score}, one per chunk of every policy, in order
          "policy_scorer"     string  the policy scorer's reference (default: the service's)
          "policy_threshold"  number  0 < t < 1 (default: the scorer's own)
          "calibration_model" string  a conformal calibration of this guard -> output "severity_set" BOOL [N, 5]:
                                      severity levels 0..4 in each text's prediction set
          "group"             string  the group whose calibration the sets use

It answers through the service's ModerationEngine, the servicer's serving path: the same model cache (a reference
by alias follows alias moves, with hot swap), the same tenant thresholds and the same dynamic batcher, so its
answers equal ModerationService.Moderate's for the same inputs (within decision.SCORE_TOLERANCE under batching)."""
from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from services.common import oip
from services.common.oip import TensorSpec
from services.common.errors import InvalidArgument
from services.common.serving import RefKey
from services.moderation.decision import Item
from services.moderation.taxonomy import MAX_SEVERITY, N_TOPICS, TOPICS


def _strings(inp, name: str, n: int | None = None) -> list[str]:
    if inp.datatype != "BYTES":
        raise InvalidInput(f"input {name!r} must be BYTES, got {inp.datatype}")
    arr = np.asarray(oip.array(inp, name), dtype=object).reshape(-1)
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


def request_parameter(payload: InferRequest, name: str) -> Any:
    """A request-level parameter: a plain value over REST; over gRPC an InferParameter (its set field)."""
    params = payload.parameters or {}
    if name not in params:
        return None
    value = params[name]
    if hasattr(value, "WhichOneof"):
        which = value.WhichOneof("parameter_choice")
        return getattr(value, which) if which else None
    return value


def _string_parameter(payload: InferRequest, name: str) -> str:
    value = request_parameter(payload, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(name, "must be a string parameter")
    return value


def moderation_request(payload: InferRequest, engine: Any, tenant_id: str, key: RefKey,
                       items: list[Item]) -> Any:
    """The engine's ModerationRequest for these items and the request's parameters (checked as the servicer
    checks its fields, with the parameter's name in the error)."""
    from services.common.serving import parse_model_ref
    from services.moderation.engine import ModerationRequest, check_policy_ids, check_policy_threshold

    policy_ids = [p.strip() for p in _string_parameter(payload, "policy_ids").split(",") if p.strip()]
    threshold = request_parameter(payload, "policy_threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise InvalidArgument("policy_threshold", "must be a number")
    scorer = RefKey(tenant_id, *parse_model_ref(_string_parameter(payload, "policy_scorer"),
                                                engine.config.default_scorer))
    calibration_ref = _string_parameter(payload, "calibration_model")
    calibration = RefKey(tenant_id, *parse_model_ref(calibration_ref, "")) if calibration_ref else None
    return ModerationRequest(tenant_id, key, tuple(items), policy_ids=tuple(check_policy_ids(policy_ids)),
                             scorer=scorer, policy_threshold=check_policy_threshold(float(threshold or 0)),
                             calibration=calibration, group=_string_parameter(payload, "group"))


class GuardPredictor(oip.DeclaredModel):
    """Serves a model reference of one tenant through a ModerationEngine (engine.py)."""

    def __init__(self, name: str, engine: Any, tenant_id: str, key: RefKey):
        super().__init__(name)
        self.engine, self.tenant_id, self.key = engine, tenant_id, key
        self.ready = False
        self.last_info = None

    def load(self) -> bool:
        """Resolve and load the reference now (blocking): ModelServer.start() serves only ready models, and a
        predictor that only resolved it answered its first requests "loading" (MODEL_NOT_REGISTERED early)."""
        self.engine.guards.warm(self.key)
        self.ready = True
        return self.ready

    def parse(self, payload: InferRequest) -> list[Item]:
        """The request's items, checked by the engine with the servicer's limits (ServingConfig)."""
        if not isinstance(payload, InferRequest):
            raise InvalidInput("expected an Open Inference Protocol v2 request")
        self.check_inputs(payload)  # declared names, datatypes and shapes
        text_in = payload.get_input_by_name("text")
        if text_in is None:
            raise InvalidInput("input 'text' (BYTES [N]) is required")
        try:
            texts = _strings(text_in, "text")
            self.engine.check_batch_size(len(texts), "text")
            role_in = payload.get_input_by_name("role")
            roles = _strings(role_in, "role", len(texts)) if role_in is not None else ["prompt"] * len(texts)
            prompt_in = payload.get_input_by_name("prompt")
            prompts = _strings(prompt_in, "prompt", len(texts)) if prompt_in is not None else [""] * len(texts)
            return [self.engine.check_item(t, r, p, lambda part, i=i: f"{part}[{i}]")
                    for i, (t, r, p) in enumerate(zip(texts, roles, prompts, strict=True))]
        except InvalidArgument as exc:
            raise InvalidInput(exc.message) from None

    INPUTS = (TensorSpec("text", "BYTES", (-1,)),
              TensorSpec("role", "BYTES", (-1,), optional=True),
              TensorSpec("prompt", "BYTES", (-1,), optional=True))
    OUTPUTS = (TensorSpec("unsafe_score", "FP64", (-1,)),
              TensorSpec("topic_scores", "FP64", (-1, N_TOPICS)),
              TensorSpec("severity", "INT32", (-1, N_TOPICS)),
              TensorSpec("blocked", "BOOL", (-1,)),
              # only when the request's parameters ask for policies / a calibration
              TensorSpec("policy_verdicts", "BYTES", (-1,), optional=True),
              TensorSpec("severity_set", "BOOL", (-1, MAX_SEVERITY + 1), optional=True))

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None,
                      response_headers: dict[str, str] | None = None) -> InferResponse:
        if not self.ready:
            self.load()
        items = self.parse(payload)
        try:
            req = moderation_request(payload, self.engine, self.tenant_id, self.key, items)
            answer = await self.engine.handle(req)
        except InvalidArgument as exc:  # a bad parameter or a model reference the engine rejects: a client error
            raise InvalidInput(exc.message) from None
        loaded, results = answer.guard, answer.results
        self.last_info = loaded.info
        n = len(items)
        out = {"unsafe_score": np.array([r.unsafe_score for r in results], dtype=np.float64),
               "topic_scores": np.array([[t.score for t in r.topics] for r in results], dtype=np.float64),
               "severity": np.array([[t.severity for t in r.topics] for r in results], dtype=np.int32),
               "blocked": np.array([r.blocked for r in results], dtype=bool)}
        outputs = []
        for name, dtype, shape in (("unsafe_score", "FP64", [n]), ("topic_scores", "FP64", [n, N_TOPICS]),
                                   ("severity", "INT32", [n, N_TOPICS]), ("blocked", "BOOL", [n])):
            o = InferOutput(name=name, shape=shape, datatype=dtype,
                            parameters={"topics": ",".join(TOPICS)} if name in ("topic_scores", "severity")
                            else None)
            o.set_data_from_numpy(out[name], binary_data=False)
            outputs.append(o)
        outputs += annotation_outputs(answer, n)
        params = {"model_version": loaded.info.fingerprint, "model_version_id": loaded.info.model_version_id,
                  "registry_version": str(loaded.info.version), "model_kind": str(loaded.config.get("kind", ""))}
        return oip.response(payload, response_id=payload.id or str(uuid.uuid4()), model_name=self.name,
                             infer_outputs=outputs, model_version=loaded.info.fingerprint, parameters=params)


def annotation_outputs(answer: Any, n: int) -> list[InferOutput]:
    """"policy_verdicts" and "severity_set" when the request asked for policies or a calibration."""
    if answer.annotations is None:
        return []
    import json

    out = []
    if any(a.verdicts for a in answer.annotations):
        rows = [json.dumps([{"policy_id": v.policy_id, "policy_version": (a.policy_versions or {})[v.policy_id],
                             "chunk_id": v.chunk_id, "violated": bool(v.violated), "score": float(v.score)}
                            for v in a.verdicts]) for a in answer.annotations]
        o = InferOutput(name="policy_verdicts", shape=[n], datatype="BYTES")
        o.set_data_from_numpy(np.array(rows, dtype=object), binary_data=False)
        out.append(o)
    if answer.calibration is not None:
        sets = np.zeros((n, MAX_SEVERITY + 1), dtype=bool)  # levels 0..4
        for i, a in enumerate(answer.annotations):
            sets[i, list(a.severity_set or ())] = True
        o = InferOutput(name="severity_set", shape=[n, MAX_SEVERITY + 1], datatype="BOOL")
        o.set_data_from_numpy(sets, binary_data=False)
        out.append(o)
    return out


def build(settings, tenant_id: str, model_ref: str) -> GuardPredictor:
    """PREDICTORS["moderation"]: a ready predictor for a registered guard or student of a tenant ("name", "name:3"
    or "name@alias"; neither: the default alias "production", else the latest version), over a ModerationEngine
    with its own database pool (thresholds and the registry)."""
    from services.common import db
    from services.common.registry import Registry
    from services.common.serving import parse_model_ref
    from services.common.spec import service_settings
    from services.common.store import ArtifactStore
    from services.moderation.engine import ModerationEngine
    from services.moderation.policy_store import ModerationStore
    from services.moderation.settings import ServingConfig

    config = service_settings(settings, "moderation", ServingConfig)
    name, version, alias = parse_model_ref(model_ref, config.default_guard)
    pool = db.create_pool(settings, max_size=4)
    engine = ModerationEngine(Registry(pool, ArtifactStore(settings)),
                              ModerationStore(pool, thresholds_ttl_s=config.thresholds_ttl_s), config)
    predictor = GuardPredictor("moderation", engine, tenant_id, RefKey(tenant_id, name, version, alias))
    predictor.load()
    return predictor
