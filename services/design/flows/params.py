"""One parameters model per job kind of the flows part; the servicer builds them from the request, the jobs
validate ctx.params with the same models (services.common.params)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from services.common.params import JobParams, ModelName

FLOW_MODEL_KIND = "design.flows.flow"
PREDICTOR_MODEL_KIND = "design.flows.predictor"
TRAIN_KIND, PREDICTOR_KIND, SAMPLE_KIND = "design.flows.train", "design.flows.train_predictor", "design.flows.sample"
BUILTIN_DIMS = {"gmm2d": ("euclidean", 2), "pointcloud": ("euclidean", 18), "so3_mixture": ("so3", 3)}
Builtin = Literal["", "gmm2d", "pointcloud", "so3_mixture"]
MAX_INT63 = 2 ** 63 - 1


class TrainFlowParams(JobParams):
    """design.flows.train: a flow registered as a model: conditional flow matching ("cfm"), energy-weighted flow
    matching toward q ~ p exp(-beta ||x - energy_center||^2 / 2) ("efm"; on SO(3) energy_center is a quaternion
    (x, y, z, w) and the energy ||R - C||_F^2 / 2 of the rotation matrices), or the exact flow of the built-in
    Gaussian mixture ("analytic", no training)."""

    name: ModelName
    builtin: Builtin = ""
    method: Literal["cfm", "efm", "analytic"] = Field("cfm", validate_default=True)
    dataset_artifact_id: str = Field("", validate_default=True)
    beta: float = Field(1.0, gt=0, le=1e3)
    energy_center: list[float] = Field(default_factory=list, max_length=4096, validate_default=True)
    steps: int = Field(2000, ge=1, le=1_000_000)
    batch_size: int = Field(256, ge=2, le=65536)
    learning_rate: float = Field(2e-3, gt=0, le=1)
    hidden: int = Field(128, ge=4, le=2048)
    layers: int = Field(3, ge=1, le=16)
    num_data: int = Field(4096, ge=16, le=1_000_000)
    seed: int = Field(0, ge=0, le=MAX_INT63)

    @field_validator("method")
    @classmethod
    def _method(cls, v: str, info: ValidationInfo) -> str:
        if v == "analytic" and info.data.get("builtin") != "gmm2d":
            raise ValueError("analytic is the exact flow of builtin gmm2d only")
        return v

    @field_validator("dataset_artifact_id")
    @classmethod
    def _source(cls, v: str, info: ValidationInfo) -> str:
        if bool(v) == bool(info.data.get("builtin")):
            raise ValueError("give exactly one of builtin and dataset_artifact_id")
        return v

    @field_validator("energy_center")
    @classmethod
    def _center(cls, v: list[float], info: ValidationInfo) -> list[float]:
        builtin = info.data.get("builtin") or ""
        if info.data.get("method") == "efm" and builtin in BUILTIN_DIMS:
            geometry, dim = BUILTIN_DIMS[builtin]
            want = energy_center_size(geometry, dim)
            if len(v) != want:
                what = "a quaternion (x, y, z, w)" if geometry == "so3" else "one per data dimension"
                raise ValueError(f"needs {want} values for builtin {builtin} ({what})")
            if geometry == "so3" and sum(c * c for c in v) < 1e-12:
                raise ValueError("a zero quaternion is not a rotation")
        return v


def energy_center_size(geometry: str, dim: int) -> int:
    """EFM's energy centre: a point (dim values) in Euclidean space, a unit quaternion (4 values) on SO(3)."""
    return 4 if geometry == "so3" else dim


class TrainPredictorParams(JobParams):
    """design.flows.train_predictor: a property predictor (regression MLP) on labelled samples, registered as a
    reward. An artifact holds x [n, d] (or quaternions [n, 4]) and y [n]; a builtin's toy property is the first
    coordinate (gmm2d, pointcloud) or R[0, 0] (so3_mixture)."""

    name: ModelName
    builtin: Builtin = ""
    dataset_artifact_id: str = Field("", validate_default=True)
    steps: int = Field(600, ge=1, le=1_000_000)
    batch_size: int = Field(256, ge=2, le=65536)
    learning_rate: float = Field(3e-3, gt=0, le=1)
    hidden: int = Field(64, ge=4, le=2048)
    layers: int = Field(2, ge=1, le=16)
    num_data: int = Field(2048, ge=16, le=1_000_000)
    seed: int = Field(0, ge=0, le=MAX_INT63)

    @field_validator("dataset_artifact_id")
    @classmethod
    def _source(cls, v: str, info: ValidationInfo) -> str:
        if bool(v) == bool(info.data.get("builtin")):
            raise ValueError("give exactly one of builtin and dataset_artifact_id")
        return v


class RewardTermParams(JobParams):
    """One weighted term of the reward (rewards.py)."""

    kind: Literal["distance", "log_density", "predictor"]
    weight: float = Field(1.0, ge=-1e6, le=1e6)
    target: list[float] = Field(default_factory=list, max_length=65536)
    scale: float = Field(1.0, gt=0, le=1e6)
    predictor_version_id: str = ""


class SampleParams(JobParams):
    """design.flows.sample: guided (or plain) sampling of a registered flow."""

    flow_version_id: str
    geometry: Literal["euclidean", "so3"]
    dim: int = Field(ge=1, le=4096)
    method: Literal["oc_flow", "d_flow", "flowgrad", "unguided"] = "oc_flow"
    reward: list[RewardTermParams] = Field(default_factory=list, max_length=32, validate_default=True)
    steps: int = Field(20, ge=1, le=1000)
    iterations: int = Field(10, ge=0, le=1000)
    num_samples: int = Field(256, ge=1, le=20000)
    learning_rate: float = Field(0.05, gt=0, le=100)
    control_cost: float = Field(1.0, ge=0, le=1e6, validate_default=True)
    seed: int = Field(0, ge=0, le=MAX_INT63)

    @field_validator("reward")
    @classmethod
    def _reward(cls, v: list, info: ValidationInfo) -> list:
        if info.data.get("method", "oc_flow") != "unguided" and not v:
            raise ValueError("a guided method needs at least one reward term")
        return v

    @field_validator("control_cost")
    @classmethod
    def _decay(cls, v: float, info: ValidationInfo) -> float:
        lr = info.data.get("learning_rate")
        if info.data.get("method") == "oc_flow" and lr is not None and lr * v >= 1:
            raise ValueError("learning_rate * control_cost must be < 1 (the control decay 1 - lr*lambda > 0)")
        return v


def check_reward_shapes(params: SampleParams) -> list[tuple[str, str]]:
    """(field path, why) for reward terms whose targets do not fit the flow's geometry and dimension."""
    bad = []
    for i, term in enumerate(params.reward):
        path = f"reward[{i}]"
        if term.kind == "distance":
            want = 4 if params.geometry == "so3" else params.dim
            if len(term.target) != want:
                bad.append((f"{path}.target", f"needs {want} values ({'a quaternion' if want == 4 and params.geometry == 'so3' else 'the flow dimension'})"))
            elif params.geometry == "so3" and sum(v * v for v in term.target) < 1e-12:
                bad.append((f"{path}.target", "a zero quaternion is not a rotation"))
        elif term.kind == "log_density":
            if params.geometry == "so3":
                bad.append((f"{path}.kind", "log_density is defined for Euclidean flows"))
            elif not term.target or len(term.target) % params.dim:
                bad.append((f"{path}.target", f"centres: a non-empty multiple of {params.dim} values"))
        elif term.kind == "predictor" and not term.predictor_version_id:
            bad.append((f"{path}.predictor", "required for a predictor term"))
    return bad
