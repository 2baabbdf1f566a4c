"""RecommendationService: proto <-> domain translation. Import, training and sweeps are jobs
(services/recommendation/jobs.py, run by workers) whose parameters are validated here with the jobs' own models
(params.py), named by the request's field paths; scoring is serving.py's (registry loading, hot swap, dynamic
batching) over the engine (recommender.py's Recommender)."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
from psycopg.types.json import Jsonb

from praxon.recommendation.v1 import recommendation_pb2 as pb
from praxon.recommendation.v1 import recommendation_pb2_grpc
from services.common import convert
from services.common.errors import InvalidArgument
from services.common.jobs import parse_uuid
from services.common.params import parse_params
from services.common.spec import service_settings
from services.common.server import AppContext, current_tenant
from services.common.serving import ModelCache, ref_key
from services.recommendation.params import ImportParams, SweepParams, TrainParams, grid_points
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

IMPORT_KIND, TRAIN_KIND, SWEEP_KIND = "recommendation.import", "recommendation.train", "recommendation.sweep"
FORMATS = {pb.DATA_FORMAT_UNSPECIFIED: None, pb.DATA_FORMAT_CSV: "csv", pb.DATA_FORMAT_TSV: "tsv",
           pb.DATA_FORMAT_PARQUET: "parquet"}
BUILTINS = {pb.BUILTIN_DATASET_ML_100K: "ml-100k", pb.BUILTIN_DATASET_SYNTHETIC: "synthetic"}
PROTOCOLS = {pb.SPLIT_PROTOCOL_UNSPECIFIED: "user_split", pb.SPLIT_PROTOCOL_USER_SPLIT: "user_split",
             pb.SPLIT_PROTOCOL_LEAVE_ONE_OUT: "leave_one_out"}
KINDS = {pb.MODEL_KIND_UNSPECIFIED: "preferdiff", pb.MODEL_KIND_PREFERDIFF: "preferdiff",
         pb.MODEL_KIND_DREAMREC: "dreamrec", pb.MODEL_KIND_SASREC_CE: "sasrec_ce",
         pb.MODEL_KIND_GRU4REC: "gru4rec", pb.MODEL_KIND_POPULARITY: "popularity"}
SCORED_BY = {MODEL: pb.SCORED_BY_MODEL, EMPTY_HISTORY: pb.SCORED_BY_POPULARITY_EMPTY_HISTORY,
             NO_KNOWN_ITEMS: pb.SCORED_BY_POPULARITY_NO_KNOWN_ITEMS, POPULARITY_MODEL: pb.SCORED_BY_POPULARITY_MODEL}
TRAIN_FIELDS = [f.name for f in pb.TrainingParams.DESCRIPTOR.fields]
SYNTH_FIELDS = [f.name for f in pb.SyntheticOptions.DESCRIPTOR.fields]
OWN_FIELDS = {"model_kind", "model_name", "dataset_artifact_id"}


def _struct_values(msg) -> dict[str, Any]:
    """Struct numbers are doubles: integral values go back to ints (float parameters accept ints)."""
    values = convert.from_struct(msg)
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in values.items()}


def training_data(kind_enum: int, params: pb.TrainingParams, extra_msg, has_extra: bool, *, prefix: str = "params",
                  extra_field: str = "extra_params") -> tuple[dict[str, Any], dict[str, str]]:
    """A request's training fields -> (TrainParams input, the request's field path of each key)."""
    data: dict[str, Any] = {"model_kind": convert.enum_of(KINDS, kind_enum, "model_kind")}
    paths = {"model_kind": "model_kind"}
    for f in TRAIN_FIELDS:
        if params.HasField(f):
            data[f] = getattr(params, f)
            paths[f] = f"{prefix}.{f}"
    extra = _struct_values(extra_msg) if has_extra else {}
    if clash := sorted(set(extra) & {*TRAIN_FIELDS, *OWN_FIELDS}):
        raise InvalidArgument(f"{extra_field}.{clash[0]}", "set by its own request field")
    data.update(extra)
    paths.update({k: f"{extra_field}.{k}" for k in extra})
    return data, paths


def import_params(request: pb.StartImportInteractionsJobRequest) -> ImportParams:
    """Request -> the import job's parameters, validated with the job's own model (request field paths)."""
    data: dict[str, Any] = {"protocol": convert.enum_of(PROTOCOLS, request.protocol, "protocol")}
    source = request.WhichOneof("source")
    if source is None:
        raise InvalidArgument("artifact_id", "give an uploaded artifact_id or a builtin dataset")
    if source == "builtin":
        if request.builtin not in BUILTINS:
            raise InvalidArgument("builtin", "one of " + ", ".join(pb.BuiltinDataset.Name(k) for k in BUILTINS))
        data["builtin"] = BUILTINS[request.builtin]
        if request.HasField("synthetic"):
            if data["builtin"] != "synthetic":
                raise InvalidArgument("synthetic", "only with builtin BUILTIN_DATASET_SYNTHETIC")
            data["synthetic"] = {f: getattr(request.synthetic, f) for f in SYNTH_FIELDS
                                 if request.synthetic.HasField(f)}
    else:
        data["artifact_id"] = parse_uuid(request.artifact_id, "artifact_id")
        if fmt := convert.enum_of(FORMATS, request.format, "format"):
            data["format"] = fmt
    for f in ("seed", "max_history"):
        if request.HasField(f):
            data[f] = getattr(request, f)
    if request.name:
        data["name"] = request.name
    return parse_params(ImportParams, data)


def train_params(request: pb.StartTrainingJobRequest, default_model: str) -> TrainParams:
    """Request -> the training job's parameters, validated with the job's own model (request field paths)."""
    data, paths = training_data(request.model_kind, request.params, request.extra_params,
                                request.HasField("extra_params"))
    data["dataset_artifact_id"] = parse_uuid(request.dataset_artifact_id, "dataset_artifact_id")
    data["model_name"] = request.model_name or default_model
    paths.update(dataset_artifact_id="dataset_artifact_id", model_name="model_name")
    return parse_params(TrainParams, data, field_paths=paths)


def sweep_params(request: pb.StartSweepJobRequest) -> SweepParams:
    base, paths = training_data(request.model_kind, request.params, request.extra_params,
                                request.HasField("extra_params"))
    if not request.grid:
        raise InvalidArgument("grid", "at least one axis")
    grid: dict[str, list[Any]] = {}
    for i, axis in enumerate(request.grid):
        if not axis.name:
            raise InvalidArgument(f"grid[{i}].name", "required")
        if axis.name in grid:
            raise InvalidArgument(f"grid[{i}].name", f"{axis.name!r} appears twice")
        if bool(axis.values) == bool(axis.text_values):
            raise InvalidArgument(f"grid[{i}].values", "give values or text_values")
        # integral doubles go to integer parameters as ints (float parameters accept ints)
        grid[axis.name] = [int(v) if float(v).is_integer() else v for v in axis.values] if axis.values else \
            list(axis.text_values)
    base.pop("dataset_artifact_id", None)
    data = {"dataset_artifact_id": parse_uuid(request.dataset_artifact_id, "dataset_artifact_id"), "base": base,
            "grid": grid, "metric": request.metric or "ndcg@10"}
    p = parse_params(SweepParams, data, field_paths={"dataset_artifact_id": "dataset_artifact_id",
                                                     "metric": "metric", "grid": "grid"})
    parse_params(TrainParams, base, field_paths=paths)  # the shared part, named as sent
    for point in grid_points(p):  # each point, before anything runs
        parse_params(TrainParams, {**base, **point}, field_paths={k: "grid" for k in grid} | paths)
    return p


def version_message(loaded: Loaded) -> pb.ModelVersionInfo:
    i = loaded.info
    return pb.ModelVersionInfo(name=i.name, version=i.version, model_version_id=i.model_version_id,
                               model_kind=i.model_kind, catalogue_size=i.catalogue_size)


def recommendations_message(row: Row) -> pb.Recommendations:
    return pb.Recommendations(
        items=[pb.ScoredItem(item_id=i, item_index=x, score=s) for i, x, s in zip(row.ids, row.indices, row.scores, strict=True)],
        scored_by=SCORED_BY[row.scored_by], fallback_reason=row.fallback_reason, unknown_item_ids=row.unknown_ids,
        history_items_used=row.history_items_used)


def same_builtin_import(conn, tenant_id: str, params: dict[str, Any], *, other_than: str | None = None):
    """The tenant's import job of a builtin dataset with exactly these parameters (source, protocol, seed, ...;
    jsonb equality) that is queued, running, or succeeded with its dataset artifact still there: the newest one,
    or None. A builtin's data never change, so that job's dataset is the one a new import would build."""
    return conn.execute(
        "SELECT * FROM jobs j WHERE j.tenant_id = %s AND j.kind = %s AND j.params = %s AND j.id IS DISTINCT FROM %s "
        "AND NOT j.cancel_requested AND (j.state IN ('QUEUED', 'RUNNING') OR (j.state = 'SUCCEEDED' AND EXISTS ("
        "SELECT 1 FROM artifacts a WHERE a.tenant_id = j.tenant_id AND a.committed "
        "AND a.id::text = j.result->>'dataset_artifact_id'))) ORDER BY j.created_at DESC LIMIT 1",
        (tenant_id, IMPORT_KIND, Jsonb(params), other_than)).fetchone()


class _Twin(Exception):
    def __init__(self, job: dict):
        super().__init__("an identical import was submitted at the same time")
        self.job = job


def _no_concurrent_twin(conn, tenant_id: str, row: dict) -> None:
    """Inside the transaction inserting a builtin import: two identical imports submitted at the same moment both
    miss same_builtin_import, so they are serialised here (an advisory lock per tenant and parameters); the later
    one sees the earlier, now committed, and rolls its own insert back (_Twin carries the job to answer with)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 18))",
                 (f"{tenant_id}:{json.dumps(row['params'], sort_keys=True)}",))
    twin = same_builtin_import(conn, tenant_id, row["params"], other_than=row["id"])
    if twin is not None:
        raise _Twin(twin)


class RecommendationServicer(recommendation_pb2_grpc.RecommendationServiceServicer):
    def __init__(self, app: AppContext, config: ServingConfig | None = None):
        self.app = app
        self.config = config or ServingConfig()
        self.models = ModelCache(app.registry, build_loaded, self.config, what="recommendation model")
        self.batcher = Batcher(max_batch=self.config.max_batch, max_wait_ms=self.config.max_wait_ms,
                               max_queued=self.config.max_queued, retry_after_s=self.config.retry_after_s)

    async def close(self) -> None:
        await self.batcher.close()
        await self.models.close()

    # -- jobs
    async def StartImportInteractionsJob(self, request, context):
        tenant, p = current_tenant(), import_params(request)
        params = p.model_dump(exclude_none=True)

        def work():
            if p.artifact_id is not None:
                self.app.registry.get_artifact(tenant, p.artifact_id, "artifact_id")  # NOT_FOUND now
                return self.app.jobs.submit(tenant, IMPORT_KIND, params, request.idempotency_key)
            with self.app.pool.connection() as conn:
                found = same_builtin_import(conn, tenant, params)
            if found is not None:
                return found
            try:
                return self.app.jobs.submit(tenant, IMPORT_KIND, params, request.idempotency_key,
                                            in_transaction=lambda conn, row: _no_concurrent_twin(conn, tenant, row))
            except _Twin as twin:
                return twin.job
        return pb.StartImportInteractionsJobResponse(job=convert.job(await asyncio.to_thread(work)))

    def _check_dataset(self, tenant: str, aid: str) -> None:
        from services.recommendation.data import DATASET_CONTENT_TYPE

        art = self.app.registry.get_artifact(tenant, aid, "dataset_artifact_id")
        if art["content_type"] != DATASET_CONTENT_TYPE:
            raise InvalidArgument("dataset_artifact_id", f"artifact {art['name']!r} is not a recommendation "
                                  "dataset; import interactions first (StartImportInteractionsJob)")

    async def StartTrainingJob(self, request, context):
        tenant = current_tenant()
        if not request.dataset_artifact_id:
            raise InvalidArgument("dataset_artifact_id", "required: the dataset an import job wrote")
        p = train_params(request, self.config.default_model)

        def work():
            self._check_dataset(tenant, p.dataset_artifact_id)
            return self.app.jobs.submit(tenant, TRAIN_KIND, p.model_dump(), request.idempotency_key)
        return pb.StartTrainingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartSweepJob(self, request, context):
        tenant = current_tenant()
        if not request.dataset_artifact_id:
            raise InvalidArgument("dataset_artifact_id", "required: the dataset an import job wrote")
        p = sweep_params(request)

        def work():
            self._check_dataset(tenant, p.dataset_artifact_id)
            return self.app.jobs.submit(tenant, SWEEP_KIND, p.model_dump(), request.idempotency_key)
        return pb.StartSweepJobResponse(job=convert.job(await asyncio.to_thread(work)))

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
