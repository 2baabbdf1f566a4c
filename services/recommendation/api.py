"""RecommendationService: proto <-> domain translation. Import and training are jobs (services/recommendation/jobs.py,
run by workers); scoring is serving.py's (registry loading, hot swap, dynamic batching) over the domain
Recommender."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc

from praxon.recommendation.v1 import recommendation_pb2 as pb
from praxon.recommendation.v1 import recommendation_pb2_grpc
from services.common import convert
from services.common.errors import FieldViolation, InvalidArgument
from services.common.jobs import parse_uuid
from services.common.registry import check_model_name
from services.common.spec import service_settings
from services.common.server import AppContext, current_tenant
from services.common.serving import ModelCache, ref_key
from services.recommendation.serving import (
    EMPTY_HISTORY,
    MODEL,
    NO_KNOWN_ITEMS,
    POPULARITY_MODEL,
    Batcher,
    Loaded,
    Row,
    ServingConfig,
    build_loaded,
    check_k,
    check_k_for,
    check_query,
    history_of,
)

IMPORT_KIND, TRAIN_KIND = "recommendation.import", "recommendation.train"
FORMATS = {pb.DATA_FORMAT_UNSPECIFIED: None, pb.DATA_FORMAT_CSV: "csv", pb.DATA_FORMAT_TSV: "tsv",
           pb.DATA_FORMAT_PARQUET: "parquet"}
BUILTINS = {pb.BUILTIN_DATASET_ML_100K: "ml-100k", pb.BUILTIN_DATASET_SYNTHETIC: "synthetic"}
KINDS = {pb.MODEL_KIND_UNSPECIFIED: "preferdiff", pb.MODEL_KIND_PREFERDIFF: "preferdiff",
         pb.MODEL_KIND_DREAMREC: "dreamrec", pb.MODEL_KIND_SASREC_CE: "sasrec_ce",
         pb.MODEL_KIND_POPULARITY: "popularity"}
SCORED_BY = {MODEL: pb.SCORED_BY_MODEL, EMPTY_HISTORY: pb.SCORED_BY_POPULARITY_EMPTY_HISTORY,
             NO_KNOWN_ITEMS: pb.SCORED_BY_POPULARITY_NO_KNOWN_ITEMS, POPULARITY_MODEL: pb.SCORED_BY_POPULARITY_MODEL}
TRAIN_FIELDS = [f.name for f in pb.TrainingParams.DESCRIPTOR.fields]
SYNTH_FIELDS = [f.name for f in pb.SyntheticOptions.DESCRIPTOR.fields]
MAX_INT32 = 2 ** 31 - 1



def _synthetic_params(opts: pb.SyntheticOptions) -> dict[str, Any]:
    """The generator's bounds, checked now so a bad request is INVALID_ARGUMENT rather than a failed job."""
    out: dict[str, Any] = {f: getattr(opts, f) for f in SYNTH_FIELDS if opts.HasField(f)}
    checks = [("n_users", 10, 1_000_000), ("n_items", 2, 1_000_000), ("n_clusters", 1, 100_000),
              ("successors", 1, 1000), ("min_len", 2, 10_000), ("max_len", 2, 10_000), ("synthetic_seed", 0, MAX_INT32)]
    for name, lo, hi in checks:
        if name in out and not lo <= out[name] <= hi:
            raise InvalidArgument(f"synthetic.{name}", f"must be in {lo}..{hi}")
    if "noise" in out and not 0.0 <= out["noise"] <= 1.0:
        raise InvalidArgument("synthetic.noise", "must be in [0, 1]")
    if out.get("min_len", 6) > out.get("max_len", 20):
        raise InvalidArgument("synthetic.min_len", "must be <= max_len")
    if out.get("n_items", 200) < 2 * out.get("successors", 3):
        raise InvalidArgument("synthetic.n_items", "must be >= 2 * successors")
    if out.get("n_users", 1000) * out.get("max_len", 20) > 5_000_000:
        raise InvalidArgument("synthetic.n_users", "the synthetic set would exceed 5M interactions")
    return out


def train_params(request: pb.StartTrainingJobRequest) -> dict[str, Any]:
    """Request -> job params, validated with the job's own parser (fields named as in the request)."""
    params: dict[str, Any] = {"model_kind": convert.enum_of(KINDS, request.model_kind, "model_kind")}
    for f in TRAIN_FIELDS:
        if request.params.HasField(f):
            params[f] = getattr(request.params, f)
    extra = convert.from_struct(request.extra_params) if request.HasField("extra_params") else {}
    if clash := sorted(set(extra) & {*TRAIN_FIELDS, "model_kind", "model_name", "dataset_artifact_id"}):
        raise InvalidArgument(f"extra_params.{clash[0]}", "set by its own request field")
    # Struct numbers are doubles: integral values go back to ints (float parameters accept ints).
    params.update({k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in extra.items()})
    from services.recommendation.training import TrainConfig  # noqa: PLC0415 - torch only when training is asked

    try:
        TrainConfig.from_params(dict(params))
    except InvalidArgument as exc:
        def name(f: str) -> str:
            short = f.removeprefix("params.")
            if short == "model_kind":
                return short
            return ("extra_params." if short.split(".")[0] in extra else "params.") + short
        raise InvalidArgument(violations=[FieldViolation(name(v.field), v.description) for v in exc.violations],
                              reason=exc.reason) from None
    return params


def version_message(loaded: Loaded) -> pb.ModelVersionInfo:
    i = loaded.info
    return pb.ModelVersionInfo(name=i.name, version=i.version, model_version_id=i.model_version_id,
                               model_kind=i.model_kind, catalogue_size=i.catalogue_size)


def recommendations_message(row: Row) -> pb.Recommendations:
    return pb.Recommendations(
        items=[pb.ScoredItem(item_id=i, item_index=x, score=s) for i, x, s in zip(row.ids, row.indices, row.scores, strict=True)],
        scored_by=SCORED_BY[row.scored_by], fallback_reason=row.fallback_reason, unknown_item_ids=row.unknown_ids,
        history_items_used=row.history_items_used)


class RecommendationServicer(recommendation_pb2_grpc.RecommendationServiceServicer):
    def __init__(self, app: AppContext, config: ServingConfig | None = None):
        self.app = app
        self.config = config or ServingConfig()
        self.models = ModelCache(app.registry, build_loaded, self.config, what="recommendation model")
        self.batcher = Batcher(max_batch=self.config.max_batch, max_wait_ms=self.config.max_wait_ms)

    async def close(self) -> None:
        await self.batcher.close()
        await self.models.close()

    # -- jobs
    async def StartImportInteractionsJob(self, request, context):
        tenant, params = current_tenant(), {}
        source = request.WhichOneof("source")
        if source is None:
            raise InvalidArgument("artifact_id", "give an uploaded artifact_id or a builtin dataset")
        if source == "builtin":
            if request.builtin not in BUILTINS:
                raise InvalidArgument("builtin", "one of " + ", ".join(pb.BuiltinDataset.Name(k) for k in BUILTINS))
            params["builtin"] = BUILTINS[request.builtin]
            if request.HasField("synthetic"):
                if params["builtin"] != "synthetic":
                    raise InvalidArgument("synthetic", "only with builtin BUILTIN_DATASET_SYNTHETIC")
                params.update(_synthetic_params(request.synthetic))
        else:
            params["artifact_id"] = parse_uuid(request.artifact_id, "artifact_id")
            if fmt := convert.enum_of(FORMATS, request.format, "format"):
                params["format"] = fmt
        if request.HasField("seed"):
            if not 0 <= request.seed <= MAX_INT32:
                raise InvalidArgument("seed", "must be >= 0")
            params["seed"] = request.seed
        if request.HasField("max_history"):
            if not 1 <= request.max_history <= 200:
                raise InvalidArgument("max_history", "must be in 1..200")
            params["max_history"] = request.max_history
        if request.name:
            if len(request.name) > 512 or not request.name.isprintable():
                raise InvalidArgument("name", "at most 512 printable characters")
            params["name"] = request.name

        def work():
            if "artifact_id" in params:
                self.app.registry.get_artifact(tenant, params["artifact_id"], "artifact_id")  # NOT_FOUND now
            return self.app.jobs.submit(tenant, IMPORT_KIND, params, request.idempotency_key)
        return pb.StartImportInteractionsJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartTrainingJob(self, request, context):
        from services.recommendation.data import DATASET_CONTENT_TYPE  # noqa: PLC0415

        tenant = current_tenant()
        if not request.dataset_artifact_id:
            raise InvalidArgument("dataset_artifact_id", "required: the dataset an import job wrote")
        aid = parse_uuid(request.dataset_artifact_id, "dataset_artifact_id")
        name = check_model_name(request.model_name or self.config.default_model, "model_name")
        params = await asyncio.to_thread(train_params, request)
        params.update(dataset_artifact_id=aid, model_name=name)

        def work():
            art = self.app.registry.get_artifact(tenant, aid, "dataset_artifact_id")
            if art["content_type"] != DATASET_CONTENT_TYPE:
                raise InvalidArgument("dataset_artifact_id", f"artifact {art['name']!r} is not a recommendation "
                                      "dataset; import interactions first (StartImportInteractionsJob)")
            return self.app.jobs.submit(tenant, TRAIN_KIND, params, request.idempotency_key)
        return pb.StartTrainingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    # -- scoring
    async def _model(self, ref) -> Loaded:
        return await self.models.get(ref_key(current_tenant(), ref, self.config.default_model), field="model")

    async def Recommend(self, request, context):
        k = check_k(request.k, self.config)
        q = check_query(request.history.item_ids, request.history.item_indices, self.config, "history")
        loaded = await self._model(request.model)
        check_k_for(loaded.rec, k, loaded.info)
        history = history_of(loaded.rec, q, "history")
        row = await self.batcher.submit(loaded.rec, history, k, request.exclude_seen)
        return pb.RecommendResponse(recommendations=recommendations_message(row), model=version_message(loaded))

    async def RecommendBatch(self, request, context):
        k = check_k(request.k, self.config)
        if not request.histories:
            raise InvalidArgument("histories", "at least one history is required")
        if len(request.histories) > self.config.max_batch_histories:
            raise InvalidArgument("histories", f"at most {self.config.max_batch_histories} histories per call")
        queries = [check_query(h.item_ids, h.item_indices, self.config, f"histories[{i}]")
                   for i, h in enumerate(request.histories)]
        loaded = await self._model(request.model)
        check_k_for(loaded.rec, k, loaded.info)
        histories = [history_of(loaded.rec, q, f"histories[{i}]") for i, q in enumerate(queries)]
        rows = await self.batcher.submit_many(loaded.rec, histories, k, request.exclude_seen)
        return pb.RecommendBatchResponse(results=[recommendations_message(r) for r in rows],
                                         model=version_message(loaded))


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    servicer = RecommendationServicer(app, service_settings(app.settings, "recommendation", ServingConfig))
    app.extras["recommendation_servicer"] = servicer  # tests and admin tooling look at its cache and batcher
    recommendation_pb2_grpc.add_RecommendationServiceServicer_to_server(servicer, server)
    return [pb.DESCRIPTOR.services_by_name["RecommendationService"].full_name]
