"""GuidedFlowService: proto <-> job parameters only (no torch here). Validation is params.py's; the work is
jobs.py's, run by workers."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc

from praxon.common.v1 import common_pb2
from praxon.design.v1 import flows_pb2 as pb
from praxon.design.v1 import flows_pb2_grpc
from services.common import convert
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobs import parse_uuid
from services.common.params import parse_params
from services.common.server import AppContext, current_tenant
from services.design.flows.params import (
    FLOW_MODEL_KIND,
    PREDICTOR_KIND,
    PREDICTOR_MODEL_KIND,
    SAMPLE_KIND,
    TRAIN_KIND,
    SampleParams,
    TrainFlowParams,
    TrainPredictorParams,
    check_reward_shapes,
)

BUILTINS = {pb.FLOW_DATASET_UNSPECIFIED: "", pb.FLOW_DATASET_GMM_2D: "gmm2d",
            pb.FLOW_DATASET_POINT_CLOUD: "pointcloud", pb.FLOW_DATASET_SO3_MIXTURE: "so3_mixture"}
TRAIN_METHODS = {pb.FLOW_TRAINING_METHOD_UNSPECIFIED: "cfm", pb.FLOW_TRAINING_METHOD_CFM: "cfm",
                 pb.FLOW_TRAINING_METHOD_EFM: "efm", pb.FLOW_TRAINING_METHOD_ANALYTIC: "analytic"}
REWARD_KINDS = {pb.REWARD_KIND_DISTANCE: "distance", pb.REWARD_KIND_LOG_DENSITY: "log_density",
                pb.REWARD_KIND_PREDICTOR: "predictor"}
GUIDANCE = {pb.GUIDANCE_METHOD_UNSPECIFIED: "oc_flow", pb.GUIDANCE_METHOD_OC_FLOW: "oc_flow",
            pb.GUIDANCE_METHOD_D_FLOW: "d_flow", pb.GUIDANCE_METHOD_FLOWGRAD: "flowgrad",
            pb.GUIDANCE_METHOD_UNGUIDED: "unguided"}
OPTION_FIELDS = [f.name for f in pb.FlowTrainingOptions.DESCRIPTOR.fields]
OPTION_PATHS = {f: f"options.{f}" for f in OPTION_FIELDS}


def _optional(msg, names) -> dict[str, Any]:
    return {n: getattr(msg, n) for n in names if msg.HasField(n)}


def _data_source(request) -> dict[str, Any]:
    out: dict[str, Any] = {"builtin": convert.enum_of(BUILTINS, request.builtin, "builtin")}
    if request.dataset_artifact_id:
        out["dataset_artifact_id"] = parse_uuid(request.dataset_artifact_id, "dataset_artifact_id")
    if not out["builtin"] and "dataset_artifact_id" not in out:
        raise InvalidArgument("dataset_artifact_id", "give a dataset artifact or a builtin data set")
    return out


def flow_training_params(request: pb.StartFlowTrainingJobRequest) -> TrainFlowParams:
    params: dict[str, Any] = {"name": request.name, **_data_source(request),
                              "method": convert.enum_of(TRAIN_METHODS, request.method, "method")}
    params.update(_optional(request.options, OPTION_FIELDS))
    if request.HasField("energy"):
        if params["method"] != "efm":
            raise InvalidArgument("energy", "only with FLOW_TRAINING_METHOD_EFM")
        params["energy_center"] = list(request.energy.center)
        if request.energy.HasField("beta"):
            params["beta"] = request.energy.beta
    elif params["method"] == "efm":
        raise InvalidArgument("energy", "required for FLOW_TRAINING_METHOD_EFM")
    return parse_params(TrainFlowParams, params, field_paths={**OPTION_PATHS, "energy_center": "energy.center",
                                                               "beta": "energy.beta"})


def predictor_training_params(request: pb.StartRewardPredictorTrainingJobRequest) -> TrainPredictorParams:
    params: dict[str, Any] = {"name": request.name, **_data_source(request)}
    params.update(_optional(request.options, OPTION_FIELDS))
    return parse_params(TrainPredictorParams, params, field_paths=OPTION_PATHS)


class GuidedFlowServicer(flows_pb2_grpc.GuidedFlowServiceServicer):
    def __init__(self, app: AppContext):
        self.app = app

    def _submit(self, tenant: str, kind: str, p, key: str, check=None) -> dict:
        if check is not None:
            check()
        return self.app.jobs.submit(tenant, kind, p.model_dump(), key)

    def _dataset(self, tenant: str, aid: str) -> None:
        if aid:
            self.app.registry.get_artifact(tenant, aid, "dataset_artifact_id")  # NOT_FOUND now, not in the job

    async def StartFlowTrainingJob(self, request, context):
        tenant, p = current_tenant(), flow_training_params(request)
        row = await asyncio.to_thread(self._submit, tenant, TRAIN_KIND, p, request.idempotency_key,
                                      lambda: self._dataset(tenant, p.dataset_artifact_id))
        return pb.StartFlowTrainingJobResponse(job=convert.job(row))

    async def StartRewardPredictorTrainingJob(self, request, context):
        tenant, p = current_tenant(), predictor_training_params(request)
        row = await asyncio.to_thread(self._submit, tenant, PREDICTOR_KIND, p, request.idempotency_key,
                                      lambda: self._dataset(tenant, p.dataset_artifact_id))
        return pb.StartRewardPredictorTrainingJobResponse(job=convert.job(row))

    def _resolve(self, tenant: str, ref: common_pb2.ModelRef, field: str, kind: str) -> dict:
        if not ref.name:
            raise InvalidArgument(f"{field}.name", "required")
        row = self.app.registry.resolve(tenant, ref.name, ref.version, ref.alias, field=field)
        if row["kind"] != kind:
            raise FailedPrecondition(f"model {ref.name} is a {row['kind']}, not a {kind}", reason="WRONG_MODEL_KIND")
        return row

    def sampling_params(self, tenant: str, request: pb.StartGuidedFlowSamplingJobRequest) -> SampleParams:
        method = convert.enum_of(GUIDANCE, request.method, "method")
        terms = []
        for i, t in enumerate(request.reward):
            if t.kind not in REWARD_KINDS:
                raise InvalidArgument(f"reward[{i}].kind", "unknown reward: one of "
                                      + ", ".join(pb.RewardKind.Name(k) for k in REWARD_KINDS))
            term: dict[str, Any] = {"kind": REWARD_KINDS[t.kind], "target": list(t.target),
                                    **_optional(t, ["weight", "scale"])}
            if t.HasField("predictor"):
                if term["kind"] != "predictor":
                    raise InvalidArgument(f"reward[{i}].predictor", "only for REWARD_KIND_PREDICTOR terms")
                term["predictor_version_id"] = str(self._resolve(tenant, t.predictor, f"reward[{i}].predictor",
                                                                 PREDICTOR_MODEL_KIND)["id"])
            terms.append(term)
        params: dict[str, Any] = {"method": method, "reward": terms,
                                  **_optional(request, ["control_cost", "steps", "iterations", "num_samples",
                                                        "learning_rate", "seed"])}
        # validate the request's own numbers before touching the registry
        parse_params(SampleParams, {**params, "flow_version_id": "-", "geometry": "euclidean", "dim": 1})
        if not request.HasField("flow"):
            raise InvalidArgument("flow.name", "required: the registered flow to sample")
        flow = self._resolve(tenant, request.flow, "flow", FLOW_MODEL_KIND)
        params.update(flow_version_id=str(flow["id"]), geometry=flow["config"]["geometry"],
                      dim=int(flow["config"]["dim"]))
        p = parse_params(SampleParams, params)
        if bad := check_reward_shapes(p):
            raise InvalidArgument(bad[0][0], bad[0][1])
        return p

    async def StartGuidedFlowSamplingJob(self, request, context):
        tenant = current_tenant()

        def work():
            p = self.sampling_params(tenant, request)
            return self.app.jobs.submit(tenant, SAMPLE_KIND, p.model_dump(), request.idempotency_key)
        return pb.StartGuidedFlowSamplingJobResponse(job=convert.job(await asyncio.to_thread(work)))


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    flows_pb2_grpc.add_GuidedFlowServiceServicer_to_server(GuidedFlowServicer(app), server)
    return [pb.DESCRIPTOR.services_by_name["GuidedFlowService"].full_name]
