"""ModerationService: proto <-> domain translation. Models are served by serving.py (registry loading, hot swap,
dynamic batching), thresholds and policies stored by policy_store.py; the decisions are the domain's
(decision.moderate_batch, stream.StreamModerator, policies.evaluate_policies)."""
from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from praxon.moderation.v1 import moderation_pb2 as pb
from praxon.moderation.v1 import moderation_pb2_grpc
from services.common import convert
from services.common.errors import FailedPrecondition, FieldViolation, InvalidArgument
from services.common.jobs import page_size
from services.common.registry import check_model_name
from services.common.spec import service_settings
from services.common.server import AppContext, current_tenant
from services.common.serving import ModelCache, ref_key
from services.moderation.decision import ModerationResult, Thresholds
from services.moderation.policy_store import ModerationStore, StoredPolicy, StoredThresholds, check_policy_id
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.serving import Batcher, Loaded, ServingConfig, build_conformal, build_guard, build_scorer
from services.moderation.taxonomy import TOPICS

ROLE_NAMES = {pb.ROLE_PROMPT: "prompt", pb.ROLE_RESPONSE: "response"}
ROLE_ENUMS = {v: k for k, v in ROLE_NAMES.items()}
FORMATS = {pb.DATASET_FORMAT_UNSPECIFIED: "praxon", pb.DATASET_FORMAT_PRAXON: "praxon",
           pb.DATASET_FORMAT_BINGOGUARD: "bingoguard", pb.DATASET_FORMAT_WILDGUARDMIX: "wildguardmix"}
KINDS = {pb.GUARD_KIND_UNSPECIFIED: "frozen_linear", pb.GUARD_KIND_FROZEN_LINEAR: "frozen_linear",
         pb.GUARD_KIND_FINETUNE: "finetune"}
METRICS = {pb.FAIRNESS_METRIC_NONE: "none", pb.FAIRNESS_METRIC_EQUAL_OPPORTUNITY: "equal_opportunity",
           pb.FAIRNESS_METRIC_DISPARATE_IMPACT: "disparate_impact",
           pb.FAIRNESS_METRIC_PREDICTIVE_EQUALITY: "predictive_equality",
           pb.FAIRNESS_METRIC_DEMOGRAPHIC_PARITY: "demographic_parity",
           pb.FAIRNESS_METRIC_OVERALL_ACC_EQUALITY: "overall_acc_equality"}
RULE_KINDS = {"blocked": pb.RULE_KIND_BLOCKED, "allowed": pb.RULE_KIND_ALLOWED}
MAX_POLICIES_PER_REQUEST = 32
MAX_DISPLAY_NAME = 200


# ---------------------------------------------------------------------------------------------- validation
def _refield(exc: InvalidArgument, old: str, new: str) -> InvalidArgument:
    """The same violations with a field prefix rewritten (domain names -> request field paths)."""
    def name(f: str) -> str:
        if f == old.rstrip("."):
            return new.rstrip(".") or f
        return new + f[len(old):] if f.startswith(old) else f
    return InvalidArgument(violations=[FieldViolation(name(v.field), v.description) for v in exc.violations],
                           reason=exc.reason)


def check_text(text: str, field: str, max_bytes: int) -> str:
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes):
        raise InvalidArgument(field, f"text is larger than {max_bytes} bytes", reason="TEXT_TOO_LARGE")
    if not text.strip():
        raise InvalidArgument(field, "must be a non-empty text", reason="EMPTY_TEXT")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidArgument(field, f"longer than {MAX_TEXT_CHARS} characters", reason="TEXT_TOO_LONG")
    return text


def decode_utf8(raw: bytes, field: str, max_bytes: int) -> str:
    if len(raw) > max_bytes:
        raise InvalidArgument(field, f"text is larger than {max_bytes} bytes", reason="TEXT_TOO_LARGE")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(field, f"not valid UTF-8 (byte {e.start})", reason="INVALID_UTF8") from None


def text_of(msg: Any, oneof: str, text_field: str, bytes_field: str, max_bytes: int,
            prefix: str = "") -> str | None:
    which = msg.WhichOneof(oneof)
    if which is None:
        return None
    if which == bytes_field:
        return check_text(decode_utf8(getattr(msg, bytes_field), prefix + bytes_field, max_bytes),
                          prefix + bytes_field, max_bytes)
    return check_text(getattr(msg, text_field), prefix + text_field, max_bytes)


def role_of(value: int, field: str, default: str) -> str:
    if value == pb.ROLE_UNSPECIFIED:
        return default
    if value not in ROLE_NAMES:
        raise InvalidArgument(field, f"unknown role {value}")
    return ROLE_NAMES[value]



def policy_threshold(value: float, field: str = "policy_threshold") -> float:
    if value == 0:
        return 0.5
    if not 0.0 < value < 1.0:
        raise InvalidArgument(field, "must be a probability strictly between 0 and 1 (0 for 0.5)")
    return float(value)


def check_policy_ids(ids: Sequence[str], field: str = "policy_ids") -> list[str]:
    if len(ids) > MAX_POLICIES_PER_REQUEST:
        raise InvalidArgument(field, f"at most {MAX_POLICIES_PER_REQUEST} policies per request")
    seen: set[str] = set()
    for i, pid in enumerate(ids):
        check_policy_id(pid, f"{field}[{i}]")
        if pid in seen:
            raise InvalidArgument(f"{field}[{i}]", f"duplicate policy id {pid}")
        seen.add(pid)
    return list(ids)


# ---------------------------------------------------------------------------------------------- messages
def version_message(loaded: Loaded) -> pb.ModelVersionInfo:
    i = loaded.info
    return pb.ModelVersionInfo(name=i.name, version=i.version, model_version_id=i.model_version_id,
                               fingerprint=i.fingerprint)


def span_message(span) -> pb.TextSpan | None:
    return None if span is None else pb.TextSpan(start=span.start, end=span.end)


def rule_match(m) -> pb.RuleMatch | None:
    if m is None:
        return None
    return pb.RuleMatch(kind=RULE_KINDS[m.kind], index=m.index, rule=m.rule, score=m.score, sentence=m.sentence,
                        span=span_message(m.span))


def content_result(r: ModerationResult) -> pb.ContentResult:
    return pb.ContentResult(
        role=ROLE_ENUMS[r.role], flagged=r.flagged, unsafe_score=r.unsafe_score, blocked=r.blocked,
        blocking_topics=list(r.blocking_topics), top_topic=r.top_topic or "",
        topics=[pb.TopicResult(topic=t.topic, name=t.name, score=t.score, present=t.present, severity=t.severity,
                               severity_at_least=list(t.severity_ge), blocked=t.blocked) for t in r.topics],
        safe_offset=r.safe_offset, evidence=span_message(r.evidence), windows=r.n_windows)


def thresholds_message(th: Thresholds) -> pb.Thresholds:
    return pb.Thresholds(levels={t: int(v) for t, v in zip(TOPICS, th.levels, strict=False)}, unsafe_threshold=th.unsafe_threshold,
                         topic_threshold=th.topic_threshold, block_unspecified=th.block_unspecified)


def policy_message(sp: StoredPolicy) -> pb.Policy:
    return pb.Policy(policy_id=sp.policy.policy_id, version=sp.version, display_name=sp.display_name,
                     chunks=[pb.PolicyChunk(id=c.id, name=c.name, core_value=c.core_value, blocked=list(c.blocked),
                                            allowed=list(c.allowed)) for c in sp.policy.chunks],
                     create_time=convert.ts(sp.created_at))


def policy_from_source(policy_id: str, source: pb.PolicySource, field: str = "source"):
    from services.moderation.policies import parse_policy_text, validate_policy  # noqa: PLC0415

    check_policy_id(policy_id)
    if source.chunks and source.text:
        raise InvalidArgument(field, "give structured chunks or the text form, not both")
    if source.chunks:
        chunks = [{"id": c.id, "name": c.name, "core_value": c.core_value, "blocked": list(c.blocked),
                   "allowed": list(c.allowed)} for c in source.chunks]
        return validate_policy({"policy_id": policy_id, "chunks": chunks}, field=field)
    if source.text:
        return parse_policy_text(source.text, policy_id=policy_id, field=f"{field}.text")
    raise InvalidArgument(field, "a policy needs chunks or the text form")


# ---------------------------------------------------------------------------------------------- servicer
class ModerationServicer(moderation_pb2_grpc.ModerationServiceServicer):
    def __init__(self, app: AppContext, config: ServingConfig | None = None):
        self.app = app
        self.config = config or ServingConfig()
        self.store = ModerationStore(app.pool, thresholds_ttl_s=self.config.thresholds_ttl_s)
        self.guards = ModelCache(app.registry, build_guard, self.config, what="guard model")
        self.scorers = ModelCache(app.registry, build_scorer, self.config, what="policy scorer")
        self.calibrations = ModelCache(app.registry, build_conformal, self.config, what="calibration model")
        self.batcher = Batcher(max_batch=self.config.max_batch, max_wait_ms=self.config.max_wait_ms,
                               workers=self.config.batch_workers)

    async def close(self) -> None:
        """Stop the batcher and background model refreshes (the serve loop's shutdown cancels them too)."""
        await self.batcher.close()
        for cache in (self.guards, self.scorers, self.calibrations):
            await cache.close()

    # -- shared steps
    async def _thresholds(self, tenant: str) -> StoredThresholds:
        hit = self.store.peek_thresholds(tenant)
        return hit if hit is not None else await asyncio.to_thread(self.store.get_thresholds, tenant, cached=True)

    async def _guard(self, tenant: str, ref, field: str = "model") -> Loaded:
        return await self.guards.get(ref_key(tenant, ref, self.config.default_guard), field=field)

    async def _extras(self, tenant: str, request, guard: Loaded, prefix: str = ""):
        """Policies (+ scorer) and the calibration model a request asks for."""
        ids = check_policy_ids(request.policy_ids, prefix + "policy_ids")
        threshold = policy_threshold(request.policy_threshold, prefix + "policy_threshold")
        policies, scorer, calib = [], None, None
        if ids:
            policies = await asyncio.to_thread(self.store.latest_policies, tenant, ids, prefix + "policy_ids")
            scorer = await self.scorers.get(ref_key(tenant, request.policy_scorer, self.config.default_scorer),
                                            field=prefix + "policy_scorer")
        if request.HasField("calibration_model"):
            if not request.calibration_model.name:
                raise InvalidArgument(prefix + "calibration_model.name", "required")
            calib = await self.calibrations.get(ref_key(tenant, request.calibration_model, ""),
                                                field=prefix + "calibration_model")
            want = str(calib.config.get("guard_model_version_id", ""))
            if want != guard.info.model_version_id:
                raise FailedPrecondition(
                    f"calibration model {calib.info.name} v{calib.info.version} was calibrated for guard version "
                    f"{want or '?'}, not {guard.info.name} v{guard.info.version} ({guard.info.model_version_id})",
                    reason="CALIBRATION_GUARD_MISMATCH")
        return policies, scorer, threshold, calib

    @staticmethod
    def _annotate(texts: Sequence[str], roles: Sequence[str], results: list[pb.ContentResult], guard: Loaded,
                  policies: list[StoredPolicy], scorer: Loaded | None, threshold: float, calib: Loaded | None,
                  group: str) -> None:
        """Policy verdicts and severity prediction sets (blocking; run in a thread)."""
        from services.moderation.encoder import get_base_encoder  # noqa: PLC0415
        from services.moderation.policies import evaluate_policies  # noqa: PLC0415

        versions = {sp.policy.policy_id: sp.version for sp in policies}
        for text, role, res in zip(texts, roles, results, strict=False):
            if policies:
                # The scorer was trained on the frozen base encoder's embeddings, whatever the guard's kind.
                verdicts = evaluate_policies(text, [sp.policy for sp in policies], scorer.obj, get_base_encoder(),
                                             threshold=threshold)
                res.policy_verdicts.extend(pb.PolicyVerdict(
                    policy_id=v.policy_id, policy_version=versions[v.policy_id], chunk_id=v.chunk_id,
                    chunk_name=v.name, violated=v.violated, score=v.score, matched=rule_match(v.matched),
                    overridden_by=rule_match(v.overridden_by)) for v in verdicts)
            if calib is not None:
                proba = guard.obj.predict_proba([text], [role])
                sets = calib.obj.prediction_sets(proba, [group] if group else None)
                res.severity_set.CopyFrom(pb.SeverityPredictionSet(
                    levels=sorted(int(x) for x in sets[0]), alpha=float(calib.obj.alpha), metric=str(calib.obj.metric),
                    calibration_model=version_message(calib)))

    async def _moderate(self, tenant: str, request, texts: list[str], roles: list[str], guard: Loaded,
                        prefix: str = "") -> list[pb.ContentResult]:
        policies, scorer, threshold, calib = await self._extras(tenant, request, guard, prefix)
        th = (await self._thresholds(tenant)).thresholds
        results = [content_result(r) for r in await self.batcher.submit_many(guard.obj, texts, roles, th)]
        if policies or calib is not None:
            await asyncio.to_thread(self._annotate, texts, roles, results, guard, policies, scorer, threshold, calib,
                                    request.group)
        return results

    # -- moderation
    async def Moderate(self, request, context):
        tenant, mb = current_tenant(), self.config.max_text_bytes
        prompt = text_of(request, "prompt_content", "prompt", "prompt_bytes", mb)
        response = text_of(request, "response_content", "response", "response_bytes", mb)
        if prompt is None and response is None:
            raise InvalidArgument("prompt", "at least one of prompt or response (as text or bytes) is required",
                                  reason="EMPTY_REQUEST")
        items = [(role, t) for role, t in (("prompt", prompt), ("response", response)) if t is not None]
        guard = await self._guard(tenant, request.model)
        results = await self._moderate(tenant, request, [t for _, t in items], [r for r, _ in items], guard)
        out = pb.ModerateResponse(model=version_message(guard))
        for (role, _), res in zip(items, results, strict=False):
            getattr(out, role).CopyFrom(res)
        return out

    async def ModerateBatch(self, request, context):
        tenant, mb = current_tenant(), self.config.max_text_bytes
        if not request.items:
            raise InvalidArgument("items", "at least one item is required", reason="EMPTY_REQUEST")
        if len(request.items) > self.config.max_batch_items:
            raise InvalidArgument("items", f"at most {self.config.max_batch_items} items")
        texts, roles = [], []
        for i, item in enumerate(request.items):
            text = text_of(item, "content", "text", "text_bytes", mb, prefix=f"items[{i}].")
            if text is None:
                raise InvalidArgument(f"items[{i}].text", "required (as text or bytes)", reason="EMPTY_TEXT")
            texts.append(text)
            roles.append(role_of(item.role, f"items[{i}].role", "prompt"))
        guard = await self._guard(tenant, request.model)
        results = await self._moderate(tenant, request, texts, roles, guard)
        return pb.ModerateBatchResponse(results=results, model=version_message(guard))

    async def ModerateStream(self, request_iterator, context) -> AsyncIterator[pb.ModerateStreamResponse]:
        from services.moderation.stream import StreamModerator  # noqa: PLC0415

        tenant, mb = current_tenant(), self.config.max_text_bytes
        mod = guard = None
        decoder = codecs.getincrementaldecoder("utf-8")()
        n_bytes = n_msgs = 0
        async for msg in request_iterator:
            if mod is None:
                role = role_of(msg.role, "role", "response")
                guard = await self._guard(tenant, msg.model)
                th = (await self._thresholds(tenant)).thresholds
                mod = StreamModerator(guard.obj, th, role=role)
            which = msg.WhichOneof("content")
            if which == "chunk_bytes":
                n_bytes += len(msg.chunk_bytes)
                if n_bytes > mb:
                    raise InvalidArgument("chunk_bytes", f"stream is larger than {mb} bytes", reason="TEXT_TOO_LARGE")
                try:
                    chunk = decoder.decode(msg.chunk_bytes)
                except UnicodeDecodeError as e:
                    raise InvalidArgument("chunk_bytes", f"not valid UTF-8 (message {n_msgs}, byte {e.start})",
                                          reason="INVALID_UTF8") from None
            else:
                chunk = msg.chunk if which == "chunk" else ""
                if chunk and decoder.getstate()[0]:
                    raise InvalidArgument("chunk", "a text chunk arrived inside an unfinished UTF-8 character",
                                          reason="INVALID_UTF8")
                n_bytes += len(chunk.encode("utf-8", "surrogatepass"))
                if n_bytes > mb:
                    raise InvalidArgument("chunk", f"stream is larger than {mb} bytes", reason="TEXT_TOO_LARGE")
            if len(mod.text) + len(chunk) > MAX_TEXT_CHARS:
                raise InvalidArgument(which or "chunk", f"stream longer than {MAX_TEXT_CHARS} characters",
                                      reason="TEXT_TOO_LONG")
            n_msgs += 1
            upd = await asyncio.to_thread(mod.feed, chunk)
            yield pb.ModerateStreamResponse(safe_offset=upd.safe_offset, blocked=upd.blocked,
                                            blocking_topics=list(upd.blocking_topics), received=upd.received,
                                            windows=upd.windows_scored, model=version_message(guard))
        if mod is None:
            raise InvalidArgument("chunk", "the stream carried no message", reason="EMPTY_TEXT")
        try:
            tail = decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InvalidArgument("chunk_bytes", "the stream ends inside a UTF-8 character",
                                  reason="INVALID_UTF8") from None
        if tail:
            await asyncio.to_thread(mod.feed, tail)
        if not mod.text.strip():
            raise InvalidArgument("chunk", "the streamed text is empty", reason="EMPTY_TEXT")
        result = await asyncio.to_thread(mod.finish)
        yield pb.ModerateStreamResponse(safe_offset=result.safe_offset, blocked=result.blocked,
                                        blocking_topics=list(result.blocking_topics), received=len(mod.text),
                                        windows=result.n_windows, final=True, result=content_result(result),
                                        model=version_message(guard))

    # -- thresholds
    async def SetThresholds(self, request, context):
        try:
            th = Thresholds.build(
                dict(request.levels),
                default_level=request.default_level if request.HasField("default_level") else 1,
                unsafe_threshold=request.unsafe_threshold if request.HasField("unsafe_threshold") else 0.5,
                topic_threshold=request.topic_threshold if request.HasField("topic_threshold") else 0.5,
                block_unspecified=request.block_unspecified if request.HasField("block_unspecified") else True,
                field="thresholds")
        except InvalidArgument as exc:
            raise _refield(exc, "thresholds.", "") from None
        stored = await asyncio.to_thread(self.store.set_thresholds, current_tenant(), th)
        return pb.SetThresholdsResponse(thresholds=thresholds_message(stored.thresholds))

    async def GetThresholds(self, request, context):
        stored = await asyncio.to_thread(self.store.get_thresholds, current_tenant())
        return pb.GetThresholdsResponse(thresholds=thresholds_message(stored.thresholds), is_default=stored.is_default,
                                        update_time=convert.ts(stored.updated_at))

    # -- policies
    @staticmethod
    def _display_name(name: str) -> str:
        if len(name) > MAX_DISPLAY_NAME:
            raise InvalidArgument("display_name", f"at most {MAX_DISPLAY_NAME} characters")
        return name.strip()

    async def CreatePolicy(self, request, context):
        policy = policy_from_source(request.policy_id, request.source)
        name = self._display_name(request.display_name)
        stored = await asyncio.to_thread(self.store.create_policy, current_tenant(), policy, name)
        return pb.CreatePolicyResponse(policy=policy_message(stored))

    async def UpdatePolicy(self, request, context):
        policy = policy_from_source(request.policy_id, request.source)
        name = self._display_name(request.display_name) or None
        if request.expected_version < 0:
            raise InvalidArgument("expected_version", "must be >= 0")
        stored = await asyncio.to_thread(self.store.update_policy, current_tenant(), policy, name,
                                         request.expected_version)
        return pb.UpdatePolicyResponse(policy=policy_message(stored))

    async def GetPolicy(self, request, context):
        stored = await asyncio.to_thread(self.store.get_policy, current_tenant(), request.policy_id, request.version)
        return pb.GetPolicyResponse(policy=policy_message(stored))

    async def ListPolicies(self, request, context):
        size = page_size(request.page_size)
        rows, token = await asyncio.to_thread(self.store.list_policies, current_tenant(), size, request.page_token)
        return pb.ListPoliciesResponse(policies=[policy_message(r) for r in rows], next_page_token=token)

    async def DeletePolicy(self, request, context):
        await asyncio.to_thread(self.store.delete_policy, current_tenant(), request.policy_id)
        return pb.DeletePolicyResponse()

    # -- jobs
    def _dataset(self, tenant: str, artifact_id: str, fmt: int, params: dict) -> None:
        params["format"] = convert.enum_of(FORMATS, fmt, "format")
        if artifact_id:
            self.app.registry.get_artifact(tenant, artifact_id, "dataset_artifact_id")  # NOT_FOUND early
            params["dataset_artifact_id"] = artifact_id

    async def StartGuardTrainingJob(self, request, context):
        from services.moderation.jobs import GuardTrainParams  # noqa: PLC0415

        tenant = current_tenant()
        params: dict[str, Any] = {"model_name": check_model_name(request.model_name or "guard", "model_name"),
                                  "kind": convert.enum_of(KINDS, request.kind, "kind")}
        for f in ("l2", "max_iter", "epochs", "trainable_layers", "lr", "head_lr", "batch_size", "seed",
                  "validation_fraction"):
            if request.HasField(f):
                params[f] = getattr(request, f)
        try:
            GuardTrainParams.parse({k: v for k, v in params.items()})
        except InvalidArgument as exc:
            raise _refield(exc, "params.", "") from None

        def work():
            self._dataset(tenant, request.dataset_artifact_id, request.format, params)
            return self.app.jobs.submit(tenant, "moderation.train_guard", params, request.idempotency_key)
        return pb.StartGuardTrainingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartPolicyScorerTrainingJob(self, request, context):
        tenant = current_tenant()
        params: dict[str, Any] = {"model_name": check_model_name(request.model_name or "policy-scorer", "model_name")}
        if request.HasField("l2"):
            if not 0 < request.l2 <= 10:
                raise InvalidArgument("l2", "must be in (0, 10]")
            params["l2"] = request.l2
        if request.HasField("seed"):
            params["seed"] = request.seed

        def work():
            self._dataset(tenant, request.dataset_artifact_id, request.format, params)
            return self.app.jobs.submit(tenant, "moderation.train_policy_scorer", params, request.idempotency_key)
        return pb.StartPolicyScorerTrainingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartCalibrationJob(self, request, context):
        from services.moderation.jobs import CalibrationParams  # noqa: PLC0415

        tenant = current_tenant()
        extra = convert.from_struct(request.extra_params) if request.HasField("extra_params") else {}
        own = {"guard_model_version_id", "model_name", "dataset_artifact_id", "format", "alpha", "metric",
               "tolerance", "c", "group_field"}
        if clash := sorted(set(extra) & own):
            raise InvalidArgument(f"extra_params.{clash[0]}", "set by its own request field")
        extra = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in extra.items()}  # Struct
        params: dict[str, Any] = {**extra, "model_name": check_model_name(request.model_name or "guard-conformal",
                                                                           "model_name")}
        if request.HasField("alpha"):
            params["alpha"] = request.alpha
        if request.metric != pb.FAIRNESS_METRIC_UNSPECIFIED:
            params["metric"] = convert.enum_of(METRICS, request.metric, "metric")
        if request.HasField("tolerance"):
            params["tolerance"] = request.tolerance
        if request.group_field:
            params["group_field"] = request.group_field
        if not request.dataset_artifact_id:
            raise InvalidArgument("dataset_artifact_id", "required: guard JSONL rows with a group column")

        def work():
            row = self.guards.resolve(ref_key(tenant, request.guard_model, self.config.default_guard), "guard_model")
            self._dataset(tenant, request.dataset_artifact_id, request.format, params)
            params["guard_model_version_id"] = str(row["id"])
            self._check_params(CalibrationParams.parse, params, set(extra))
            return self.app.jobs.submit(tenant, "moderation.calibrate", params, request.idempotency_key)
        return pb.StartCalibrationJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartDistillationJob(self, request, context):
        from services.moderation.jobs import DistillParams  # noqa: PLC0415

        tenant = current_tenant()
        extra = convert.from_struct(request.extra_params) if request.HasField("extra_params") else {}
        if clash := sorted(set(extra) & {"teacher_model_version_id", "model_name", "dataset_artifact_id", "format",
                                         "augment"}):
            raise InvalidArgument(f"extra_params.{clash[0]}", "set by its own request field")
        extra = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in extra.items()}  # Struct
        params: dict[str, Any] = {**extra, "model_name": check_model_name(request.model_name or "guard-student",
                                                                           "model_name")}
        if request.HasField("augment"):
            params["augment"] = request.augment

        def work():
            row = self.guards.resolve(ref_key(tenant, request.teacher_model, self.config.default_guard),
                                      "teacher_model")
            self._dataset(tenant, request.dataset_artifact_id, request.format, params)
            params["teacher_model_version_id"] = str(row["id"])
            self._check_params(DistillParams.parse, params, set(extra))
            return self.app.jobs.submit(tenant, "moderation.distill", params, request.idempotency_key)
        return pb.StartDistillationJobResponse(job=convert.job(await asyncio.to_thread(work)))

    @staticmethod
    def _check_params(parse, params: dict[str, Any], extra_keys: set[str]) -> None:
        """Validate with the job's own parser now, naming request fields ("params.x" -> "x" or "extra_params.x")."""
        try:
            parse(dict(params))
        except InvalidArgument as exc:
            raise InvalidArgument(violations=[FieldViolation(
                ("extra_params." if v.field.removeprefix("params.").split(".")[0] in extra_keys else "")
                + v.field.removeprefix("params."), v.description) for v in exc.violations], reason=exc.reason) from None


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    config = service_settings(app.settings, "moderation", ServingConfig)
    servicer = ModerationServicer(app, config)
    app.extras["moderation_servicer"] = servicer  # tests and admin tooling look at its caches
    moderation_pb2_grpc.add_ModerationServiceServicer_to_server(servicer, server)
    return [pb.DESCRIPTOR.services_by_name["ModerationService"].full_name]
