"""ModerationService: proto <-> domain translation, nothing else. Every answer comes from the ModerationEngine
(engine.py: model caches with hot swap, tenant thresholds, dynamic batching), the same one the kserve predictor
uses; job parameters are the typed models of params.py, validated here with the request's field names."""
from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from praxon.common.v1 import common_pb2
from praxon.moderation.v1 import moderation_pb2 as pb
from praxon.moderation.v1 import moderation_pb2_grpc
from services.common import convert
from services.common.errors import InvalidArgument
from services.common.jobs import page_size
from services.common.params import parse_params
from services.common.server import AppContext, current_tenant
from services.common.serving import ref_key
from services.common.spec import service_settings
from services.moderation import params as mp
from services.moderation.bias_store import BiasCertificates
from services.moderation.decision import DEFAULT_LEVEL, Item, ModerationResult, Thresholds
from services.moderation.engine import (
    Annotation,
    ModerationEngine,
    ModerationRequest,
    check_policy_ids,
    check_policy_threshold,
    check_text,
)
from services.moderation.policy_store import ModerationStore, StoredPolicy, check_policy_id
from services.moderation.schema import MAX_TEXT_CHARS
from services.moderation.serving import Loaded
from services.moderation.settings import ServingConfig
from services.moderation.taxonomy import TOPICS

ROLE_NAMES = {pb.ROLE_PROMPT: "prompt", pb.ROLE_RESPONSE: "response"}
ROLE_ENUMS = {v: k for k, v in ROLE_NAMES.items()}
FORMATS = {pb.DATASET_FORMAT_UNSPECIFIED: "praxon", pb.DATASET_FORMAT_PRAXON: "praxon",
           pb.DATASET_FORMAT_BINGOGUARD: "bingoguard", pb.DATASET_FORMAT_WILDGUARDMIX: "wildguardmix"}
KINDS = {pb.GUARD_KIND_UNSPECIFIED: "frozen_linear", pb.GUARD_KIND_FROZEN_LINEAR: "frozen_linear",
         pb.GUARD_KIND_FINETUNE: "finetune", pb.GUARD_KIND_GEMMA_FROZEN: "gemma_frozen",
         pb.GUARD_KIND_GEMMA_LORA: "gemma_lora"}
POOLS = {pb.GUARD_POOLING_UNSPECIFIED: "mean", pb.GUARD_POOLING_MEAN: "mean", pb.GUARD_POOLING_LAST: "last"}
METRICS = {pb.FAIRNESS_METRIC_NONE: "none", pb.FAIRNESS_METRIC_EQUAL_OPPORTUNITY: "equal_opportunity",
           pb.FAIRNESS_METRIC_DISPARATE_IMPACT: "disparate_impact",
           pb.FAIRNESS_METRIC_PREDICTIVE_EQUALITY: "predictive_equality",
           pb.FAIRNESS_METRIC_DEMOGRAPHIC_PARITY: "demographic_parity",
           pb.FAIRNESS_METRIC_OVERALL_ACC_EQUALITY: "overall_acc_equality"}
RULE_KINDS = {"blocked": pb.RULE_KIND_BLOCKED, "allowed": pb.RULE_KIND_ALLOWED}
PREFIX_DISTRIBUTIONS = {pb.PREFIX_DISTRIBUTION_UNSPECIFIED: "random_tokens", pb.PREFIX_DISTRIBUTION_NONE: "none",
                        pb.PREFIX_DISTRIBUTION_RANDOM_TOKENS: "random_tokens",
                        pb.PREFIX_DISTRIBUTION_JAILBREAK_MIXTURE: "jailbreak_mixture",
                        pb.PREFIX_DISTRIBUTION_SOFT_JAILBREAK: "soft_jailbreak"}
PREFIX_ENUMS = {v: k for k, v in PREFIX_DISTRIBUTIONS.items() if k != pb.PREFIX_DISTRIBUTION_UNSPECIFIED}
BIAS_DETECTORS = {pb.BIAS_DETECTOR_UNSPECIFIED: "agreement", pb.BIAS_DETECTOR_AGREEMENT: "agreement",
                  pb.BIAS_DETECTOR_GUARD: "guard"}
DETECTOR_ENUMS = {"agreement": pb.BIAS_DETECTOR_AGREEMENT, "guard": pb.BIAS_DETECTOR_GUARD}
MAX_DISPLAY_NAME = 200


# ---------------------------------------------------------------------------------------------- validation
# The limits on what is moderated (check_text, ModerationEngine.check_*) live in engine.py, shared with the predictor.
def decode_utf8(raw: bytes, field: str, max_bytes: int) -> str:
    if len(raw) > max_bytes:
        raise InvalidArgument(field, f"text is larger than {max_bytes} bytes", reason="TEXT_TOO_LARGE")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(field, f"not valid UTF-8 (byte {e.start})", reason="INVALID_UTF8") from None


def text_of(msg: Any, oneof: str, text_field: str, bytes_field: str, max_bytes: int) -> str | None:
    which = msg.WhichOneof(oneof)
    if which is None:
        return None
    if which == bytes_field:
        return check_text(decode_utf8(getattr(msg, bytes_field), bytes_field, max_bytes), bytes_field, max_bytes)
    return check_text(getattr(msg, text_field), text_field, max_bytes)


def role_of(value: int, field: str, default: str) -> str:
    if value == pb.ROLE_UNSPECIFIED:
        return default
    if value not in ROLE_NAMES:
        raise InvalidArgument(field, f"unknown role {value}")
    return ROLE_NAMES[value]



# ---------------------------------------------------------------------------------------------- messages
def version_message(loaded: Loaded) -> pb.ModelVersionInfo:
    i = loaded.info
    return pb.ModelVersionInfo(name=i.name, version=i.version, model_version_id=i.model_version_id,
                               fingerprint=i.fingerprint, kind=str(loaded.config.get("kind", "")))


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
    """Unset probability thresholds (the served model's decision defaults) are 0 on the wire."""
    return pb.Thresholds(levels={t: int(v) for t, v in zip(TOPICS, th.levels, strict=True)},
                         unsafe_threshold=th.unsafe_threshold or 0.0, topic_threshold=th.topic_threshold or 0.0,
                         block_unspecified=th.block_unspecified)


def annotate_message(res: pb.ContentResult, ann: Annotation, calib: Loaded | None) -> None:
    versions = ann.policy_versions or {}
    res.policy_verdicts.extend(pb.PolicyVerdict(
        policy_id=v.policy_id, policy_version=versions[v.policy_id], chunk_id=v.chunk_id, chunk_name=v.name,
        violated=v.violated, score=v.score, matched=rule_match(v.matched), overridden_by=rule_match(v.overridden_by))
        for v in ann.verdicts)
    if ann.severity_set is not None and calib is not None:
        res.severity_set.CopyFrom(pb.SeverityPredictionSet(
            levels=list(ann.severity_set), alpha=float(calib.obj.alpha), metric=str(calib.obj.metric),
            calibration_model=version_message(calib)))


def policy_message(sp: StoredPolicy) -> pb.Policy:
    return pb.Policy(policy_id=sp.policy.policy_id, version=sp.version, display_name=sp.display_name,
                     chunks=[pb.PolicyChunk(id=c.id, name=c.name, core_value=c.core_value, blocked=list(c.blocked),
                                            allowed=list(c.allowed)) for c in sp.policy.chunks],
                     create_time=convert.ts(sp.created_at))


def policy_from_source(policy_id: str, source: pb.PolicySource, field: str = "source"):
    from services.moderation.policies import parse_policy_text, validate_policy

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


def certificate_message(c) -> pb.BiasCertificate:
    """A bias_store.Certificate as its proto message."""
    return pb.BiasCertificate(
        id=c.id, job_id=c.job_id,
        generator_model=common_pb2.ModelRef(name=c.generator_name, version=c.generator_version),
        generator_model_version_id=c.generator_model_version_id,
        prefix_distribution=PREFIX_ENUMS.get(c.prefix_distribution, pb.PREFIX_DISTRIBUTION_UNSPECIFIED),
        detector=DETECTOR_ENUMS.get(c.detector, pb.BIAS_DETECTOR_UNSPECIFIED),
        detector_model_version_id=c.detector_model_version_id, groups=list(c.groups), confidence=c.confidence,
        samples=c.samples, unbiased=c.unbiased, lower=c.lower, upper=c.upper,
        prompts=[pb.PromptBound(prompt=str(x.get("prompt", "")), samples=int(x.get("samples", 0)),
                                unbiased=int(x.get("unbiased", 0)), lower=float(x.get("lower", 0.0)),
                                upper=float(x.get("upper", 1.0))) for x in c.prompts],
        spec_sha256=c.spec_sha256, params=convert.struct(c.params), create_time=convert.ts(c.created_at))


# ---------------------------------------------------------------------------------------------- servicer
class ModerationServicer(moderation_pb2_grpc.ModerationServiceServicer):
    def __init__(self, app: AppContext, config: ServingConfig | None = None):
        self.app = app
        self.config = config or ServingConfig()
        self.store = ModerationStore(app.pool, thresholds_ttl_s=self.config.thresholds_ttl_s)
        self.engine = ModerationEngine(app.registry, self.store, self.config)
        self.guards, self.batcher = self.engine.guards, self.engine.batcher  # tests and admin tooling
        self.certificates = BiasCertificates(app.pool)

    async def close(self) -> None:
        """Stop the batcher and background model refreshes (the serve loop's shutdown cancels them too)."""
        await self.engine.close()

    # -- shared steps
    def _key(self, tenant: str, ref, default: str):
        return ref_key(tenant, ref, default)

    async def _moderate(self, tenant: str, request, items: list[Item], prefix: str = ""
                        ) -> tuple[Loaded, list[pb.ContentResult]]:
        """One typed request from the proto, one engine call, the answer back to proto."""
        req = ModerationRequest(
            tenant, self._key(tenant, request.model, self.config.default_guard), tuple(items),
            policy_ids=tuple(check_policy_ids(request.policy_ids, prefix + "policy_ids")),
            scorer=self._key(tenant, request.policy_scorer, self.config.default_scorer),
            policy_threshold=check_policy_threshold(request.policy_threshold, prefix + "policy_threshold"),
            calibration=(self._key(tenant, request.calibration_model, "")
                         if request.HasField("calibration_model") else None),
            group=request.group, prefix=prefix)
        answer = await self.engine.handle(req)
        out = [content_result(r) for r in answer.results]
        for res, ann in zip(out, answer.annotations or (), strict=False):
            annotate_message(res, ann, answer.calibration)
        return answer.guard, out

    # -- moderation
    async def Moderate(self, request, context):
        tenant, mb = current_tenant(), self.config.max_text_bytes
        prompt = text_of(request, "prompt_content", "prompt", "prompt_bytes", mb)
        response = text_of(request, "response_content", "response", "response_bytes", mb)
        if prompt is None and response is None:
            raise InvalidArgument("prompt", "at least one of prompt or response (as text or bytes) is required",
                                  reason="EMPTY_REQUEST")
        items = ([Item(prompt, "prompt")] if prompt is not None else []) + (
            [Item(response, "response", prompt)] if response is not None else [])  # the pair: response | prompt
        guard, results = await self._moderate(tenant, request, items)
        out = pb.ModerateResponse(model=version_message(guard))
        for it, res in zip(items, results, strict=True):
            getattr(out, it.role).CopyFrom(res)
        return out

    async def ModerateBatch(self, request, context):
        tenant, mb = current_tenant(), self.config.max_text_bytes
        self.engine.check_batch_size(len(request.items), "items")
        items = []
        for i, item in enumerate(request.items):
            which = item.WhichOneof("content")
            if which is None:
                raise InvalidArgument(f"items[{i}].text", "required (as text or bytes)", reason="EMPTY_TEXT")
            text = decode_utf8(item.text_bytes, f"items[{i}].text_bytes", mb) if which == "text_bytes" else item.text
            role = role_of(item.role, f"items[{i}].role", "prompt")
            items.append(self.engine.check_item(text, role, item.prompt, lambda part, i=i, which=which:
                                                f"items[{i}].{which if part == 'text' else part}"))
        guard, results = await self._moderate(tenant, request, items)
        return pb.ModerateBatchResponse(results=results, model=version_message(guard))

    async def ModerateStream(self, request_iterator, context) -> AsyncIterator[pb.ModerateStreamResponse]:
        tenant, mb = current_tenant(), self.config.max_text_bytes
        mod = guard = None
        decoder = codecs.getincrementaldecoder("utf-8")()
        n_bytes = n_msgs = 0
        async for msg in request_iterator:
            if mod is None:
                role = role_of(msg.role, "role", "response")
                prompt = None
                if msg.prompt:
                    if role != "response":
                        raise InvalidArgument("prompt", "only a response stream is judged with a prompt")
                    prompt = check_text(msg.prompt, "prompt", mb)
                guard, mod = await self.engine.open_stream(
                    tenant, self._key(tenant, msg.model, self.config.default_guard), role, prompt)
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
        last = mod.final_update()
        yield pb.ModerateStreamResponse(safe_offset=last.safe_offset, blocked=last.blocked,
                                        blocking_topics=list(last.blocking_topics), received=len(mod.text),
                                        windows=result.n_windows, final=True, result=content_result(result),
                                        model=version_message(guard))

    # -- thresholds
    async def SetThresholds(self, request, context):
        th = Thresholds.build(
            dict(request.levels),
            default_level=request.default_level if request.HasField("default_level") else DEFAULT_LEVEL,
            unsafe_threshold=request.unsafe_threshold if request.HasField("unsafe_threshold") else None,
            topic_threshold=request.topic_threshold if request.HasField("topic_threshold") else None,
            block_unspecified=request.block_unspecified if request.HasField("block_unspecified") else True,
            field="")
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
            params["dataset_artifact_id"] = artifact_id

    def _check_artifact(self, tenant: str, artifact_id: str | None) -> None:
        if artifact_id:
            self.app.registry.get_artifact(tenant, artifact_id, "dataset_artifact_id")  # NOT_FOUND early

    @staticmethod
    def _optional(request, fields: Sequence[str]) -> dict[str, Any]:
        return {f: getattr(request, f) for f in fields if request.HasField(f)}

    @staticmethod
    def _extra(request, own: set[str]) -> dict[str, Any]:
        extra = convert.from_struct(request.extra_params) if request.HasField("extra_params") else {}
        if clash := sorted(set(extra) & own):
            raise InvalidArgument(f"extra_params.{clash[0]}", "set by its own request field")
        return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in extra.items()}  # Struct

    async def _submit(self, tenant: str, kind: str, params, request) -> pb.Job:
        def work():
            self._check_artifact(tenant, getattr(params, "dataset_artifact_id", None))
            return self.app.jobs.submit(tenant, kind, params.model_dump(mode="json", exclude_none=True),
                                        request.idempotency_key)
        return convert.job(await asyncio.to_thread(work))

    async def StartGuardTrainingJob(self, request, context):
        tenant = current_tenant()
        raw: dict[str, Any] = {"model_name": request.model_name or "guard",
                               "kind": convert.enum_of(KINDS, request.kind, "kind"),
                               "pool": convert.enum_of(POOLS, request.pool, "pool"),
                               **self._optional(request, ("l2", "max_iter", "epochs", "trainable_layers", "lr",
                                                          "head_lr", "batch_size", "seed", "validation_fraction",
                                                          "layer", "max_tokens", "lora_rank", "lora_alpha",
                                                          "lora_layers"))}
        self._dataset(tenant, request.dataset_artifact_id, request.format, raw)
        if raw["kind"] in mp.GEMMA_KINDS:
            if not request.backbone_model.name:
                raise InvalidArgument("backbone_model.name", f"required for kind {pb.GuardKind.Name(request.kind)} "
                                      "(the language model the guard reads)")
            lm = await asyncio.to_thread(self._language_model, tenant, request.backbone_model, "backbone_model")
            raw["backbone_model_version_id"] = lm["generator_model_version_id"]
        elif request.HasField("backbone_model"):
            raise InvalidArgument("backbone_model", "only for kinds GUARD_KIND_GEMMA_FROZEN and GUARD_KIND_GEMMA_LORA")
        if request.HasField("teacher_model"):
            if raw["kind"] != "frozen_linear":
                raise InvalidArgument("teacher_model", "only for kind GUARD_KIND_FROZEN_LINEAR (distilled heads)")
            key = ref_key(tenant, request.teacher_model, self.config.default_guard)
            row = await asyncio.to_thread(self.guards.resolve, key, "teacher_model")
            raw["teacher_model_version_id"] = str(row["id"])
        params = parse_params(mp.GuardTrainParams, raw)
        return pb.StartGuardTrainingJobResponse(job=await self._submit(tenant, "moderation.train_guard", params,
                                                                       request))

    async def StartPolicyScorerTrainingJob(self, request, context):
        tenant = current_tenant()
        raw: dict[str, Any] = {"model_name": request.model_name or "policy-scorer",
                               **self._optional(request, ("l2", "seed"))}
        self._dataset(tenant, request.dataset_artifact_id, request.format, raw)
        params = parse_params(mp.PolicyScorerTrainParams, raw)
        return pb.StartPolicyScorerTrainingJobResponse(job=await self._submit(
            tenant, "moderation.train_policy_scorer", params, request))

    async def StartCalibrationJob(self, request, context):
        tenant = current_tenant()
        extra = self._extra(request, {"guard_model_version_id", "model_name", "dataset_artifact_id", "format",
                                      "alpha", "metric", "tolerance", "c", "group_field"})
        raw: dict[str, Any] = {**extra, "model_name": request.model_name or "guard-conformal",
                               **self._optional(request, ("alpha", "tolerance"))}
        if request.metric != pb.FAIRNESS_METRIC_UNSPECIFIED:
            raw["metric"] = convert.enum_of(METRICS, request.metric, "metric")
        if request.group_field:
            raw["group_field"] = request.group_field
        if not request.dataset_artifact_id:
            raise InvalidArgument("dataset_artifact_id", "required: guard JSONL rows with a group column")
        paths = {k: f"extra_params.{k}" for k in extra}

        def resolve():
            row = self.guards.resolve(ref_key(tenant, request.guard_model, self.config.default_guard), "guard_model")
            self._dataset(tenant, request.dataset_artifact_id, request.format, raw)
            raw["guard_model_version_id"] = str(row["id"])
            return parse_params(mp.CalibrationParams, raw, field_paths=paths)
        params = await asyncio.to_thread(resolve)
        return pb.StartCalibrationJobResponse(job=await self._submit(tenant, "moderation.calibrate", params, request))

    async def StartDistillationJob(self, request, context):
        tenant = current_tenant()
        extra = self._extra(request, {"teacher_model_version_id", "model_name", "dataset_artifact_id", "format",
                                      "augment", "generator_name", "generator_version",
                                      "generator_model_version_id"})
        raw: dict[str, Any] = {**extra, "model_name": request.model_name or "guard-student",
                               **self._optional(request, ("augment",))}
        paths = {k: f"extra_params.{k}" for k in extra}

        def resolve():
            row = self.guards.resolve(ref_key(tenant, request.teacher_model, self.config.default_guard),
                                      "teacher_model")
            self._dataset(tenant, request.dataset_artifact_id, request.format, raw)
            raw["teacher_model_version_id"] = str(row["id"])
            if request.generator_model.name:
                raw.update(self._language_model(tenant, request.generator_model, "generator_model"))
            elif request.HasField("generator_model"):
                raise InvalidArgument("generator_model.name", "required when a generator model is given")
            return parse_params(mp.DistillParams, raw, field_paths=paths)
        params = await asyncio.to_thread(resolve)
        return pb.StartDistillationJobResponse(job=await self._submit(tenant, "moderation.distill", params, request))

    def _language_model(self, tenant: str, ref, field: str) -> dict[str, Any]:
        """A generation-service language model of the tenant's registry, pinned: {generator_name, generator_version,
        generator_model_version_id}."""
        from services.common.hf import REGISTRY_KIND

        row = self.app.registry.resolve(tenant, ref.name, ref.version, ref.alias, field=field)
        if row["kind"] != REGISTRY_KIND:
            raise InvalidArgument(field, f"{ref.name} is a {row['kind']} model, not a language model of the "
                                  "generation service")
        return {"generator_name": row["name"], "generator_version": int(row["version"]),
                "generator_model_version_id": str(row["id"])}

    async def StartBiasCertificationJob(self, request, context):
        tenant = current_tenant()
        own = {"generator_name", "generator_version", "generator_model_version_id", "prompts", "groups",
               "prefix_distribution", "detector", "detector_model_version_id", "confidence", "samples", "seed"}
        extra = self._extra(request, own)
        raw: dict[str, Any] = {**extra, "prompts": list(request.prompts), "groups": list(request.groups),
                               "prefix_distribution": convert.enum_of(PREFIX_DISTRIBUTIONS, request.prefix_distribution,
                                                                      "prefix_distribution"),
                               "detector": convert.enum_of(BIAS_DETECTORS, request.detector, "detector"),
                               **self._optional(request, ("confidence", "samples", "seed"))}
        paths = {k: f"extra_params.{k}" for k in extra} | {"generator_name": "generator_model.name",
                                                           "generator_version": "generator_model.version",
                                                           "detector_model_version_id": "detector_model"}
        gen = request.generator_model
        if not gen.name:
            raise InvalidArgument("generator_model.name", "required: the language model to certify")

        def resolve():
            raw.update(self._language_model(tenant, gen, "generator_model"))
            if raw["detector"] == "guard":
                guard = self.guards.resolve(ref_key(tenant, request.detector_model, self.config.default_guard),
                                            "detector_model")
                raw["detector_model_version_id"] = str(guard["id"])
            elif request.HasField("detector_model"):
                raise InvalidArgument("detector_model", "only the guard detector takes a model")
            return parse_params(mp.BiasCertParams, raw, field_paths=paths)
        params = await asyncio.to_thread(resolve)
        return pb.StartBiasCertificationJobResponse(job=await self._submit(tenant, "moderation.certify_bias", params,
                                                                           request))

    async def GetBiasCertificate(self, request, context):
        cert = await asyncio.to_thread(self.certificates.get, current_tenant(), request.certificate_id)
        return pb.GetBiasCertificateResponse(certificate=certificate_message(cert))

    async def ListBiasCertificates(self, request, context):
        size = page_size(request.page_size)
        rows, token = await asyncio.to_thread(self.certificates.list, current_tenant(), size, request.page_token,
                                              request.generator_model_version_id)
        return pb.ListBiasCertificatesResponse(certificates=[certificate_message(c) for c in rows],
                                               next_page_token=token)


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    config = service_settings(app.settings, "moderation", ServingConfig)
    servicer = ModerationServicer(app, config)
    app.extras["moderation_servicer"] = servicer  # tests and admin tooling look at its caches
    moderation_pb2_grpc.add_ModerationServiceServicer_to_server(servicer, server)
    return [pb.DESCRIPTOR.services_by_name["ModerationService"].full_name]
