"""CrystalService: proto <-> job params (services/design/crystals/params.py); the jobs do the work
(services/design/crystals/jobs.py). No torch is imported here: the servicer validates with the params models and the
Wyckoff tables (pyxtal)."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc

from praxon.design.v1 import crystals_pb2 as pb
from praxon.design.v1 import crystals_pb2_grpc
from services.common import convert
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.common.jobs import parse_uuid
from services.common.params import parse_params
from services.common.registry import check_model_name
from services.common.server import AppContext, current_tenant
from services.design.crystals.params import (MAX_CELL_ATOMS, GenerateParams, ImportParams, TrainParams,
                                             check_request)

IMPORT_KIND, TRAIN_KIND, GENERATE_KIND = "design.crystals.import", "design.crystals.train", "design.crystals.generate"
DATASET_CONTENT_TYPE = "application/vnd.praxon.crystals-dataset+json"  # data.DATASET_CONTENT_TYPE
MODEL_FORMAT = "praxon.design.crystals.symmcd/v1"  # jobs.MODEL_FORMAT
METHODS = {pb.CRYSTAL_GENERATION_METHOD_UNSPECIFIED: "model", pb.CRYSTAL_GENERATION_METHOD_MODEL: "model",
           pb.CRYSTAL_GENERATION_METHOD_PYXTAL_RANDOM: "pyxtal_random"}
TRAIN_FIELDS = [f.name for f in pb.CrystalTrainingParams.DESCRIPTOR.fields]
MAX_INT31 = 2 ** 31 - 1


def import_params(request: pb.StartImportCrystalsJobRequest) -> dict[str, Any]:
    params: dict[str, Any] = {"builtin": request.builtin, "name": request.name}
    params["artifact_ids"] = [parse_uuid(a, f"artifact_ids[{i}]") for i, a in enumerate(request.artifact_ids)]
    for f in ("n_random", "include_shipped", "seed"):
        if request.HasField(f):
            params[f] = getattr(request, f)
    if not request.builtin and not request.artifact_ids:
        raise InvalidArgument("artifact_ids", "give uploaded CIF artifacts, or builtin")
    if request.builtin and request.artifact_ids:
        raise InvalidArgument("builtin", "give artifact_ids or builtin, not both")
    parse_params(ImportParams, params)
    return params


def train_params(request: pb.StartCrystalTrainingJobRequest) -> dict[str, Any]:
    if not request.dataset_artifact_id:
        raise InvalidArgument("dataset_artifact_id", "required: the dataset an import job wrote")
    params: dict[str, Any] = {"dataset_artifact_id": parse_uuid(request.dataset_artifact_id, "dataset_artifact_id"),
                              "symmetric": not request.remove_symmetry,
                              "model_name": check_model_name(request.model_name or (
                                  "symmcd-p1" if request.remove_symmetry else "symmcd"), "model_name")}
    for f in TRAIN_FIELDS:
        if request.params.HasField(f):
            params[f] = getattr(request.params, f)
    parse_params(TrainParams, params, field_paths={f: f"params.{f}" for f in TRAIN_FIELDS})
    return params


def generation_params(request: pb.StartCrystalGenerationJobRequest) -> dict[str, Any]:
    method = convert.enum_of(METHODS, request.method, "method")
    if request.space_group and request.space_group_distribution:
        raise InvalidArgument("space_group", "give space_group or space_group_distribution, not both")
    groups: dict[int, float] = {}
    if request.space_group:
        if not 1 <= request.space_group <= 230:
            raise InvalidArgument("space_group", f"unknown space group {request.space_group}: international "
                                  "numbers are 1..230")
        groups[request.space_group] = 1.0
    for i, sw in enumerate(request.space_group_distribution):
        if not 1 <= sw.space_group <= 230:
            raise InvalidArgument(f"space_group_distribution[{i}].space_group",
                                  f"unknown space group {sw.space_group}: international numbers are 1..230")
        if not sw.weight > 0 or sw.weight != sw.weight or sw.weight == float("inf"):
            raise InvalidArgument(f"space_group_distribution[{i}].weight", "must be a finite number > 0")
        if sw.space_group in groups:
            raise InvalidArgument(f"space_group_distribution[{i}].space_group", "listed twice")
        groups[sw.space_group] = sw.weight
    lo, hi = 1, 48
    if request.HasField("atom_count_range"):
        lo, hi = request.atom_count_range.min, request.atom_count_range.max
        if not 1 <= lo <= MAX_CELL_ATOMS:
            raise InvalidArgument("atom_count_range.min", f"must be in 1..{MAX_CELL_ATOMS}")
        if not lo <= hi <= MAX_CELL_ATOMS:
            raise InvalidArgument("atom_count_range.max", f"must be in min..{MAX_CELL_ATOMS}")
    if not 1 <= request.num_samples <= 2000:
        raise InvalidArgument("num_samples", "must be in 1..2000")
    params: dict[str, Any] = {"method": method, "space_groups": groups, "min_atoms": lo, "max_atoms": hi,
                              "composition_hints": list(request.composition_hints), "n": request.num_samples}
    if request.HasField("seed"):
        if not 0 <= request.seed <= MAX_INT31:
            raise InvalidArgument("seed", f"must be in 0..{MAX_INT31}")
        params["seed"] = request.seed
    if request.HasField("batch_size"):
        if not 1 <= request.batch_size <= 256:
            raise InvalidArgument("batch_size", "must be in 1..256")
        params["batch_size"] = request.batch_size
    if request.sampling_steps:
        if not 1 <= request.sampling_steps <= 2000:
            raise InvalidArgument("sampling_steps", "must be in 1..2000 (at most the model's T), or 0 for all T")
        params["sampling_steps"] = request.sampling_steps
    if request.HasField("max_retries"):
        if not 0 <= request.max_retries <= 10:
            raise InvalidArgument("max_retries", "must be in 0..10")
        params["max_retries"] = request.max_retries
    if request.formula:
        params["formula"] = request.formula
    if request.require_valid_composition:
        params["require_valid_composition"] = True
    if request.reference_dataset_artifact_id:
        params["reference_dataset_artifact_id"] = parse_uuid(request.reference_dataset_artifact_id,
                                                             "reference_dataset_artifact_id")
    elif method == "pyxtal_random":
        raise InvalidArgument("reference_dataset_artifact_id", "required by the pyxtal random baseline")
    if method == "model" and not request.model.name:
        raise InvalidArgument("model.name", "required: the SymmCD model to sample")
    check = dict(params, model_version_id="pending" if method == "model" else "")
    p = parse_params(GenerateParams, check, field_paths={"composition_hints": "composition_hints",
                                                         "space_groups": "space_group_distribution",
                                                         "n": "num_samples", "min_atoms": "atom_count_range.min",
                                                         "max_atoms": "atom_count_range.max",
                                                         "formula": "formula"})
    check_request(p)
    params["composition_hints"] = list(p.composition_hints)
    if p.formula:
        params["formula"] = p.formula
    return params


def crystal_set(job: dict) -> pb.CrystalSet:
    res = job["result"] or {}
    s = res.get("summary", {})
    summary = pb.CrystalSetSummary(**{k: (v if v is not None else float("nan")) for k, v in s.items()
                                      if k in pb.CrystalSetSummary.DESCRIPTOR.fields_by_name})
    rows = []
    fields = pb.CrystalRow.DESCRIPTOR.fields_by_name
    for r in res.get("rows", []):
        rows.append(pb.CrystalRow(**{k: v for k, v in r.items() if k in fields}))
    return pb.CrystalSet(job_id=str(job["id"]), summary=summary, rows=rows,
                         report_artifact_id=str(res.get("report_artifact_id", "")))


class CrystalServicer(crystals_pb2_grpc.CrystalServiceServicer):
    def __init__(self, app: AppContext):
        self.app = app

    def _dataset(self, tenant: str, aid: str, field: str) -> None:
        art = self.app.registry.get_artifact(tenant, aid, field)
        if art["content_type"] != DATASET_CONTENT_TYPE:
            raise InvalidArgument(field, f"artifact {art['name']!r} is not a crystal dataset; import CIFs first "
                                  "(StartImportCrystalsJob)")

    async def StartImportCrystalsJob(self, request, context):
        tenant = current_tenant()
        params = import_params(request)

        def work():
            params["artifact_names"] = [self.app.registry.get_artifact(tenant, aid, f"artifact_ids[{i}]")["name"]
                                        for i, aid in enumerate(params["artifact_ids"])]  # NOT_FOUND now
            return self.app.jobs.submit(tenant, IMPORT_KIND, params, request.idempotency_key)
        return pb.StartImportCrystalsJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartCrystalTrainingJob(self, request, context):
        tenant = current_tenant()
        params = train_params(request)

        def work():
            self._dataset(tenant, params["dataset_artifact_id"], "dataset_artifact_id")
            return self.app.jobs.submit(tenant, TRAIN_KIND, params, request.idempotency_key)
        return pb.StartCrystalTrainingJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def StartCrystalGenerationJob(self, request, context):
        tenant = current_tenant()
        params = await asyncio.to_thread(generation_params, request)

        def work():
            if params["method"] == "model":
                m = request.model
                row = self.app.registry.resolve(tenant, m.name, m.version, m.alias, "model")
                if (row.get("config") or {}).get("format") != MODEL_FORMAT:
                    raise InvalidArgument("model", f"model {m.name!r} is not a SymmCD model")
                T = int(((row.get("config") or {}).get("model") or {}).get("timesteps") or 0)
                if T and params.get("sampling_steps", 0) > T:
                    raise InvalidArgument("sampling_steps", f"model {m.name!r} has T={T} timesteps: give 1..{T} "
                                          "(or 0 for all of them)")
                params["model_version_id"] = str(row["id"])
            if params.get("reference_dataset_artifact_id"):
                self._dataset(tenant, params["reference_dataset_artifact_id"], "reference_dataset_artifact_id")
            return self.app.jobs.submit(tenant, GENERATE_KIND, params, request.idempotency_key)
        return pb.StartCrystalGenerationJobResponse(job=convert.job(await asyncio.to_thread(work)))

    async def GetCrystalSet(self, request, context):
        tenant = current_tenant()
        job = await asyncio.to_thread(self.app.jobs.get, tenant, request.job_id, "job_id")
        if job["kind"] != GENERATE_KIND:
            raise NotFound(f"job {request.job_id} is not a crystal generation job")
        if job["state"] != "SUCCEEDED":
            raise FailedPrecondition(f"job {request.job_id} is {job['state']}, not SUCCEEDED",
                                     reason="JOB_NOT_SUCCEEDED")
        return pb.GetCrystalSetResponse(crystal_set=crystal_set(job))


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    crystals_pb2_grpc.add_CrystalServiceServicer_to_server(CrystalServicer(app), server)
    return [pb.DESCRIPTOR.services_by_name["CrystalService"].full_name]
