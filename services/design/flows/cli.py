"""`praxon design flows ...`: train a flow (train), train a reward predictor (predictor), guided sampling (sample),
and the demo step. A plain client of GuidedFlowService and ArtifactService; imports no torch."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used, so that `praxon --help` loads no grpc)
    from praxon.design.v1 import flows_pb2 as pb, flows_pb2_grpc
    from services.common.client import Target

# enum values by name (protobuf takes the names; the contracts are imported where used)
BUILTINS = {"gmm2d": "FLOW_DATASET_GMM_2D", "pointcloud": "FLOW_DATASET_POINT_CLOUD",
            "so3_mixture": "FLOW_DATASET_SO3_MIXTURE"}
TRAIN_METHODS = {"cfm": "FLOW_TRAINING_METHOD_CFM", "efm": "FLOW_TRAINING_METHOD_EFM",
                 "analytic": "FLOW_TRAINING_METHOD_ANALYTIC"}
GUIDANCE = {"oc_flow": "GUIDANCE_METHOD_OC_FLOW", "d_flow": "GUIDANCE_METHOD_D_FLOW",
            "flowgrad": "GUIDANCE_METHOD_FLOWGRAD", "unguided": "GUIDANCE_METHOD_UNGUIDED"}
REWARDS = {"distance": "REWARD_KIND_DISTANCE", "log_density": "REWARD_KIND_LOG_DENSITY",
           "predictor": "REWARD_KIND_PREDICTOR"}


def _stub(target: Target) -> flows_pb2_grpc.GuidedFlowServiceStub:
    from praxon.design.v1 import flows_pb2_grpc

    return flows_pb2_grpc.GuidedFlowServiceStub(target.channel())


def _floats(text: str | None) -> list[float]:
    return [float(v) for v in text.split(",")] if text else []


def _options(args) -> pb.FlowTrainingOptions:
    from praxon.design.v1 import flows_pb2 as pb

    o = pb.FlowTrainingOptions()
    for name in ("steps", "batch_size", "learning_rate", "hidden", "layers", "num_data", "seed"):
        if getattr(args, name, None) is not None:
            setattr(o, name, getattr(args, name))
    return o


def parse_reward(text: str) -> pb.RewardTerm:
    """"distance:4,0", "distance:4,0@0.5" (weight), "log_density:4,0,-4,0/0.5" (centres / scale),
    "predictor=name:1" (a registered predictor)."""
    from praxon.design.v1 import flows_pb2 as pb
    from services.common.client import model_ref

    kind, _, rest = text.partition(":") if not text.startswith("predictor=") else ("predictor", "", text)
    if kind == "predictor":
        ref, _, weight = rest.removeprefix("predictor=").partition("@")
        term = pb.RewardTerm(kind=pb.REWARD_KIND_PREDICTOR, predictor=model_ref(ref))
    else:
        if kind not in REWARDS:
            raise SystemExit(f"error: unknown reward {kind!r} (distance, log_density, predictor=NAME)")
        rest, _, weight = rest.partition("@")
        values, _, scale = rest.partition("/")
        term = pb.RewardTerm(kind=REWARDS[kind], target=_floats(values))
        if scale:
            term.scale = float(scale)
    if weight:
        term.weight = float(weight)
    return term


def cmd_train(args) -> None:
    from praxon.design.v1 import flows_pb2 as pb
    from services.common.client import resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    req = pb.StartFlowTrainingJobRequest(name=args.name, builtin=BUILTINS.get(args.builtin or "", 0),
                                         dataset_artifact_id=args.dataset_artifact or "",
                                         method=TRAIN_METHODS[args.method], options=_options(args))
    if args.method == "efm":
        req.energy.CopyFrom(pb.QuadraticEnergy(center=_floats(args.energy_center), beta=args.beta))
    job = _stub(target).StartFlowTrainingJob(req, metadata=target.metadata).job
    _report(target, job, args.no_wait)


def cmd_predictor(args) -> None:
    from praxon.design.v1 import flows_pb2 as pb
    from services.common.client import resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    req = pb.StartRewardPredictorTrainingJobRequest(name=args.name, builtin=BUILTINS.get(args.builtin or "", 0),
                                                    dataset_artifact_id=args.dataset_artifact or "",
                                                    options=_options(args))
    job = _stub(target).StartRewardPredictorTrainingJob(req, metadata=target.metadata).job
    _report(target, job, args.no_wait)


def sampling_request(args) -> pb.StartGuidedFlowSamplingJobRequest:
    from praxon.design.v1 import flows_pb2 as pb
    from services.common.client import model_ref

    req = pb.StartGuidedFlowSamplingJobRequest(flow=model_ref(args.flow), method=GUIDANCE[args.method],
                                               reward=[parse_reward(r) for r in args.reward or []])
    for name in ("control_cost", "steps", "iterations", "num_samples", "learning_rate", "seed"):
        if getattr(args, name) is not None:
            setattr(req, name, getattr(args, name))
    return req


def cmd_sample(args) -> None:
    from services.common.client import resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    job = _stub(target).StartGuidedFlowSamplingJob(sampling_request(args), metadata=target.metadata).job
    _report(target, job, args.no_wait)


def print_sampling(result: dict, out=None) -> None:
    w = (out or sys.stdout).write
    w(f"{result['method']} on {result['geometry']}: reward {result['reward_before']:.4g} -> "
      f"{result['reward_after']:.4g}; on support {result['on_support_before']:.3f} -> "
      f"{result['on_support_after']:.3f}; mean deviation {result['deviation']:.4g}\n")
    per = result.get("per_iteration", {})
    for i, (r, s) in enumerate(zip(per.get("reward", []), per.get("on_support", []), strict=False)):
        w(f"  iteration {i:3d}: reward {r:10.4g}  on support {s:.3f}\n")
    w(f"  samples: artifact {result['samples_artifact_id']}"
      + (f"; plot: artifact {result['plot_artifact_id']}" if result.get("plot_artifact_id") else "") + "\n")


def _report(target: Target, job, no_wait: bool) -> None:
    from services.common.client import state_name, wait_for_success
    from services.common.convert import from_struct

    print(f"job {job.id} ({job.kind}) {state_name(job.state)}")
    if no_wait:
        return
    done = wait_for_success(target, job)
    result = from_struct(done.result)
    if done.kind == "design.flows.sample":
        print_sampling(result)
    else:
        print(" ".join(f"{k}={v}" for k, v in sorted(result.items())))


def add_commands(parts, client_opts) -> None:
    sp = parts.add_parser("flows", help="guided flow sampling: train | predictor | sample")
    fsub = sp.add_subparsers(dest="action", required=True)

    def training_opts(p, steps_help: str) -> None:
        client_opts(p)
        p.add_argument("--name", required=True)
        p.add_argument("--builtin", choices=sorted(BUILTINS))
        p.add_argument("--dataset-artifact", help="an uploaded safetensors artifact id")
        p.add_argument("--steps", type=int, help=steps_help)
        p.add_argument("--batch-size", type=int)
        p.add_argument("--learning-rate", type=float)
        p.add_argument("--hidden", type=int)
        p.add_argument("--layers", type=int)
        p.add_argument("--num-data", type=int)
        p.add_argument("--seed", type=int)
        p.add_argument("--no-wait", action="store_true")

    p = fsub.add_parser("train", help="train a flow (cfm, efm) or register the analytic mixture flow")
    training_opts(p, "optimiser steps (default 2000)")
    p.add_argument("--method", choices=sorted(TRAIN_METHODS), default="cfm")
    p.add_argument("--energy-center",
                   help="EFM: comma-separated centre of the quadratic energy (SO(3): a quaternion x,y,z,w)")
    p.add_argument("--beta", type=float, default=1.0, help="EFM: inverse temperature")
    p.set_defaults(func=cmd_train)

    p = fsub.add_parser("predictor", help="train a property predictor to use as a reward")
    training_opts(p, "optimiser steps (default 600)")
    p.set_defaults(func=cmd_predictor)

    p = fsub.add_parser("sample", help="sample a flow, guided by OC-Flow / D-Flow / FlowGrad, or plainly")
    client_opts(p)
    p.add_argument("--flow", required=True, help="name, name:version or name@alias")
    p.add_argument("--reward", action="append",
                   help="distance:X,Y[@W] | log_density:C1,C2,..[/SCALE][@W] | predictor=NAME[:V][@W] (repeatable)")
    p.add_argument("--method", choices=sorted(GUIDANCE), default="oc_flow")
    p.add_argument("--control-cost", type=float, help="lambda (default 1)")
    p.add_argument("--steps", type=int)
    p.add_argument("--iterations", type=int)
    p.add_argument("--num-samples", type=int)
    p.add_argument("--learning-rate", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(func=cmd_sample)


def demo(target: Target) -> None:
    """Register the exact flow of the 8-mode ring, then guide 256 samples toward the mode at (4, 0) with OC-Flow
    and print reward and on-support fraction per iteration (a PNG of before/after is the job's artifact)."""
    from praxon.design.v1 import flows_pb2 as pb
    from services.common.client import wait_for_success
    from services.common.convert import from_struct

    stub = _stub(target)
    job = stub.StartFlowTrainingJob(pb.StartFlowTrainingJobRequest(
        name="demo-ring-flow", builtin=pb.FLOW_DATASET_GMM_2D, method=pb.FLOW_TRAINING_METHOD_ANALYTIC),
        metadata=target.metadata).job
    flow = wait_for_success(target, job).models[0]
    print(f"registered {flow.name} v{flow.version} (the exact flow of the 8-mode ring)")
    job = stub.StartGuidedFlowSamplingJob(pb.StartGuidedFlowSamplingJobRequest(
        flow=flow, reward=[pb.RewardTerm(kind=pb.REWARD_KIND_DISTANCE, target=[4.0, 0.0])], control_cost=0.05,
        steps=20, iterations=15, num_samples=256, learning_rate=0.1, method=pb.GUIDANCE_METHOD_OC_FLOW),
        metadata=target.metadata).job
    print_sampling(from_struct(wait_for_success(target, job).result))
