"""The flows part's long jobs, each a Steps protocol run by services.common.jobcontext.run_steps (resume from the
last checkpoint, cancellation at step boundaries, progress):

  design.flows.train            train a flow (CFM / EFM / SO(3) geodesic CFM) or register the analytic mixture flow
  design.flows.train_predictor  train a property predictor, registered as a reward
  design.flows.sample           plain or guided sampling (OC-Flow, D-Flow, FlowGrad), samples and stats as artifacts

Minibatches come from a generator seeded by (seed, step), so a resumed run draws the same batches as an
uninterrupted one."""
from __future__ import annotations

import io
import math
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.common.registry import SAFETENSORS
from services.design.flows import geometry as so3
from services.design.flows import guidance as G
from services.design.flows import training as T
from services.design.flows.mixture import builtin_gmm2d
from services.design.flows.models import (
    FLOW_MODEL_KIND,
    PREDICTOR_MODEL_KIND,
    AnalyticGMMFlow,
    Predictor,
    SO3VelocityMLP,
    VelocityMLP,
    build_flow,
    build_predictor,
    tensors_of,
)
from services.design.flows.params import (
    BUILTIN_DIMS,
    SampleParams,
    TrainFlowParams,
    TrainPredictorParams,
    check_reward_shapes,
    energy_center_size,
)
from services.design.flows.rewards import Reward, Term

PNG = "image/png"


def _gen(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (2 ** 63))


def read_points(ctx: JobContext, artifact_id: str, *, labels: bool = False
                ) -> tuple[str, torch.Tensor, torch.Tensor | None]:
    """(geometry, data, labels) from a safetensors artifact: x [n, d] or quaternions [n, 4] (and y [n])."""
    try:
        tensors = st_load(ctx.read_artifact(artifact_id))
    except (SafetensorError, ValueError, RuntimeError, OSError) as exc:
        raise InvalidArgument("dataset_artifact_id", f"not a safetensors file: {exc}") from None
    if "quaternions" in tensors:
        q = tensors["quaternions"].double()
        if q.ndim != 2 or q.shape[1] != 4 or not torch.isfinite(q).all() or (q.norm(dim=1) < 1e-8).any():
            raise InvalidArgument("dataset_artifact_id", "quaternions must be [n, 4], finite and non-zero")
        geometry, data = "so3", so3.from_quat(q)
    elif "x" in tensors:
        data = tensors["x"].float()
        if data.ndim != 2 or data.shape[1] < 1 or not torch.isfinite(data).all():
            raise InvalidArgument("dataset_artifact_id", "x must be a finite [n, d] tensor")
        geometry = "euclidean"
    else:
        raise InvalidArgument("dataset_artifact_id", "expected a tensor 'x' [n, d] or 'quaternions' [n, 4]")
    if len(data) < 2:
        raise InvalidArgument("dataset_artifact_id", "needs at least 2 samples")
    y = None
    if labels:
        if "y" not in tensors or tensors["y"].reshape(-1).shape[0] != len(data):
            raise InvalidArgument("dataset_artifact_id", "labels 'y' [n] are required, one per sample")
        y = tensors["y"].reshape(-1).double()
        if not torch.isfinite(y).all():
            raise InvalidArgument("dataset_artifact_id", "labels must be finite")
    return geometry, data, y


# ------------------------------------------------------------------------------------------------ train a flow
class TrainFlow:
    def __init__(self, p: TrainFlowParams):
        self.p = p

    def setup(self, ctx: JobContext) -> None:
        p = self.p
        if p.builtin:
            self.geometry = BUILTIN_DIMS[p.builtin][0]
            self.data = T.builtin_data(p.builtin, p.num_data, _gen(p.seed, -1))
        else:
            self.geometry, self.data, _ = read_points(ctx, p.dataset_artifact_id)
        self.dim = 3 if self.geometry == "so3" else int(self.data.shape[1])
        if p.method == "efm":
            want = energy_center_size(self.geometry, self.dim)
            if len(p.energy_center) != want:
                raise InvalidArgument("params.energy_center", f"needs {want} values " + (
                    "(a quaternion x, y, z, w)" if self.geometry == "so3" else "(the data dimension)"))
            c = torch.tensor(p.energy_center, dtype=torch.float64)
            if self.geometry == "so3":
                if float(c.norm()) < 1e-6:
                    raise InvalidArgument("params.energy_center", "a zero quaternion is not a rotation")
                c = so3.from_quat(c)  # the centre rotation C of E(R) = ||R - C||_F^2 / 2
            self.center = c
        if p.method == "analytic":
            self.model = AnalyticGMMFlow(builtin_gmm2d(torch.float32))
            self.total = 0
        else:
            torch.manual_seed(p.seed)
            self.model = (SO3VelocityMLP(p.hidden, p.layers) if self.geometry == "so3"
                          else VelocityMLP(self.dim, p.hidden, p.layers))
            if self.geometry == "so3":
                self.data = self.data.float()
            self.opt = torch.optim.Adam(self.model.parameters(), lr=p.learning_rate)
            self.total = p.steps
        self.loss_ema = float("nan")

    def step(self, i: int) -> dict[str, float]:
        p, g = self.p, _gen(self.p.seed, i)
        idx = torch.randint(0, len(self.data), (min(p.batch_size, len(self.data)),), generator=g)
        x1 = self.data[idx]
        if self.geometry == "so3" and p.method == "efm":
            loss = T.so3_efm_loss(self.model, x1, g, T.so3_quadratic_energy(x1, self.center), p.beta)
        elif self.geometry == "so3":
            loss = T.so3_cfm_loss(self.model, x1, g)
        elif p.method == "efm":
            loss = T.efm_loss(self.model, x1, g, T.quadratic_energy(x1, self.center), p.beta)
        else:
            loss = T.cfm_loss(self.model, x1, g)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        lv = float(loss.detach())
        self.loss_ema = lv if math.isnan(self.loss_ema) else 0.95 * self.loss_ema + 0.05 * lv
        return {"loss": lv}

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "loss_ema": self.loss_ema}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.loss_ema = float(state["loss_ema"])

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p = self.p
        config = {**self.model.config(), "method": p.method, "builtin": p.builtin,
                  "dataset_artifact_id": p.dataset_artifact_id, "steps": p.steps if self.total else 0}
        if p.method == "efm":
            config.update(beta=p.beta, energy_center=list(p.energy_center))
        metrics = {} if math.isnan(self.loss_ema) else {"final_loss": self.loss_ema}
        info = ctx.register_model(p.name, tensors_of(self.model), kind=FLOW_MODEL_KIND, config=config,
                                  metrics=metrics, dataset_artifact_id=p.dataset_artifact_id or None)
        return {"model_version_id": info.model_version_id, "name": p.name, "geometry": self.geometry,
                "dim": self.dim, "method": p.method, **metrics}


def run_train_flow(ctx: JobContext) -> dict:
    p = parse_params(TrainFlowParams, ctx.params, prefix="params.")
    return run_steps(ctx, TrainFlow(p), checkpoint_every=max(1, p.steps // 20))


# ----------------------------------------------------------------------------------------- train a predictor
def builtin_labels(name: str, x: torch.Tensor) -> torch.Tensor:
    return (x[:, 0, 0] if name == "so3_mixture" else x[:, 0]).double()


class TrainPredictor:
    def __init__(self, p: TrainPredictorParams):
        self.p = p

    def setup(self, ctx: JobContext) -> None:
        p = self.p
        if p.builtin:
            self.geometry = BUILTIN_DIMS[p.builtin][0]
            x = T.builtin_data(p.builtin, p.num_data, _gen(p.seed, -1))
            y = builtin_labels(p.builtin, x)
        else:
            self.geometry, x, y = read_points(ctx, p.dataset_artifact_id, labels=True)
        self.x = x.float()
        self.y = y.float()
        feats = self.x.flatten(1)
        torch.manual_seed(p.seed)
        self.dim = 3 if self.geometry == "so3" else int(feats.shape[1])
        self.model = Predictor(feats.shape[1], p.hidden, p.layers, self.geometry)
        self.model.x_mean.copy_(feats.mean(0))
        self.model.x_std.copy_(feats.std(0).clamp_min(1e-6))
        self.model.y_mean.copy_(self.y.mean())
        self.model.y_std.copy_(self.y.std().clamp_min(1e-6))
        self.opt = torch.optim.Adam(self.model.net.parameters(), lr=p.learning_rate)
        self.total = p.steps
        self.last = float("nan")

    def step(self, i: int) -> dict[str, float]:
        g = _gen(self.p.seed, i)
        idx = torch.randint(0, len(self.x), (min(self.p.batch_size, len(self.x)),), generator=g)
        loss = T.predictor_loss(self.model, self.x[idx], self.y[idx])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.last = float(loss.detach())
        return {"loss": self.last}

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "last": self.last}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.last = float(state["last"])

    def result(self, ctx: JobContext) -> dict[str, Any]:
        with torch.no_grad():
            pred = self.model(self.x)
            r2 = 1 - float(((pred - self.y) ** 2).mean() / self.y.var().clamp_min(1e-12))
        config = {**self.model.config(), "builtin": self.p.builtin,
                  "dataset_artifact_id": self.p.dataset_artifact_id}
        info = ctx.register_model(self.p.name, tensors_of(self.model), kind=PREDICTOR_MODEL_KIND, config=config,
                                  metrics={"train_r2": r2}, dataset_artifact_id=self.p.dataset_artifact_id or None)
        return {"model_version_id": info.model_version_id, "name": self.p.name, "train_r2": r2,
                "geometry": self.geometry}


def run_train_predictor(ctx: JobContext) -> dict:
    p = parse_params(TrainPredictorParams, ctx.params, prefix="params.")
    return run_steps(ctx, TrainPredictor(p), checkpoint_every=max(1, p.steps // 10))


# -------------------------------------------------------------------------------------------- guided sampling
def build_reward(ctx: JobContext, p: SampleParams) -> Reward:
    terms = []
    for i, t in enumerate(p.reward):
        dtype = torch.float64
        target = torch.tensor(t.target, dtype=dtype) if t.target else None
        module = None
        if t.kind == "predictor":
            tensors, config = ctx.load_model(t.predictor_version_id)
            module = build_predictor(tensors, config).double()
            if config.get("geometry") != p.geometry or (p.geometry == "euclidean" and int(config["dim"]) != p.dim):
                raise InvalidArgument(f"reward[{i}].predictor", "the predictor's inputs do not match the flow")
        terms.append(Term(t.kind, t.weight, target, t.scale, module, name=f"reward[{i}]"))
    return Reward(p.geometry, p.dim, terms)


class GuidedSampling:
    """Steps = optimisation iterations; the state is the guide's controls (and start) plus the per-iteration
    statistics. Statistics: mean reward, deviation from the unguided samples of the same noise, the control cost,
    and the on-support fraction: Euclidean, the share of samples whose log-density under the flow (analytic, or by
    the change of variables) is at least the unguided samples' 5th percentile; SO(3), the share whose geodesic
    distance to the nearest rotation of a reference set (a second, independent unguided draw of the same size) is
    at most the 95th percentile of the reference's own leave-one-out nearest-neighbour distance. No sample is
    scored against itself, so the unguided set's figure ("before") is a measurement near 0.95, not 1 by
    construction."""

    def __init__(self, p: SampleParams):
        self.p = p
        self.total = p.iterations if p.method != "unguided" else 0

    def setup(self, ctx: JobContext) -> None:
        p = self.p
        tensors, config = ctx.load_model(p.flow_version_id)
        self.flow = build_flow(tensors, config).double()
        for q in self.flow.parameters():
            q.requires_grad_(False)
        self.reward = build_reward(ctx, p)
        g = _gen(p.seed, 0)
        kw = dict(steps=p.steps, lam=p.control_cost, lr=p.learning_rate, method=p.method)
        if p.geometry == "so3":
            self.noise = so3.uniform(p.num_samples, g, torch.float64)
            self.guide = G.SO3Guide(self.flow, self.reward, self.noise, **kw)
            self.plain = G.so3_simulate(self.flow, self.noise, None, self.guide.ts)[-1]
            ref_noise = so3.uniform(p.num_samples, _gen(p.seed, 1), torch.float64)
            self.reference = G.so3_simulate(self.flow, ref_noise, None, self.guide.ts)[-1]
            if p.num_samples > 1:
                loo = G.so3_nn_distance(self.reference, self.reference, exclude_self=True)
                self.threshold = float(loo.quantile(0.95))
            else:  # one reference rotation: no leave-one-out distance; the support is the whole group
                self.threshold = math.pi
        else:
            self.noise = torch.randn(p.num_samples, p.dim, generator=g, dtype=torch.float64)
            self.guide = G.EuclideanGuide(self.flow, self.reward, self.noise, **kw)
            self.plain = G.sample_plain(self.flow, self.noise, p.steps)
            self.threshold = float(G.flow_log_density(self.flow, self.plain, p.steps).quantile(0.05))
        self.history: dict[str, list[float]] = {k: [] for k in ("reward", "on_support", "deviation", "control_cost",
                                                                "orthogonality_error", "det_error")}
        self.record(self.plain)

    def on_support(self, x: torch.Tensor) -> float:
        if self.p.geometry == "so3":
            return float((G.so3_nn_distance(x, self.reference) <= self.threshold).double().mean())
        return float((G.flow_log_density(self.flow, x, self.p.steps) >= self.threshold).double().mean())

    def record(self, x: torch.Tensor) -> dict[str, float]:
        with torch.no_grad():
            reward = float(self.reward(x).mean()) if self.reward.terms else 0.0
        if self.p.geometry == "so3":
            dev = float(so3.geodesic(x, self.plain).mean())
            orth = float(so3.orthogonality_error(x))
            det = float((torch.linalg.det(x) - 1).abs().max())
        else:
            dev, orth, det = float((x - self.plain).norm(dim=-1).mean()), 0.0, 0.0
        row = {"reward": reward, "on_support": self.on_support(x), "deviation": dev,
               "control_cost": self.guide.control_cost(), "orthogonality_error": orth, "det_error": det}
        for k, v in row.items():
            self.history[k].append(v)
        return row

    def step(self, i: int) -> dict[str, float]:
        self.guide.iterate()
        row = self.record(self.guide.samples())
        return {k: row[k] for k in ("reward", "on_support", "deviation")}

    def state(self) -> dict[str, Any]:
        return {"guide": self.guide.state(), "history": self.history}

    def load_state(self, state: dict[str, Any]) -> None:
        self.guide.load_state(state["guide"])
        self.history = {k: [float(v) for v in vals] for k, vals in state["history"].items()}

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p = self.p
        final = self.guide.samples()
        if p.geometry == "so3":
            tensors = {"quaternions": so3.to_quat(final).float(), "unguided_quaternions": so3.to_quat(self.plain).float(),
                       "initial_quaternions": so3.to_quat(self.noise).float()}
        else:
            tensors = {"samples": final.float(), "unguided": self.plain.float(), "initial_noise": self.noise.float()}
        tensors = {k: v.contiguous() for k, v in tensors.items()}
        samples_id = ctx.write_artifact("guided-samples.safetensors", st_save(tensors), SAFETENSORS,
                                        {"method": p.method, "geometry": p.geometry})
        out: dict[str, Any] = {
            "samples_artifact_id": samples_id, "method": p.method, "geometry": p.geometry,
            "num_samples": p.num_samples, "iterations": self.total,
            "reward_before": self.history["reward"][0], "reward_after": self.history["reward"][-1],
            "on_support_before": self.history["on_support"][0], "on_support_after": self.history["on_support"][-1],
            "deviation": self.history["deviation"][-1], "support_threshold": self.threshold,
            "per_iteration": self.history}
        if p.geometry == "euclidean" and p.dim == 2:
            out["plot_artifact_id"] = ctx.write_artifact("guided-samples.png", scatter_png(self.plain, final, p.method),
                                                         PNG)
        return out


def scatter_png(before: torch.Tensor, after: torch.Tensor, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4))
    for i, (x, name) in enumerate([(before, "unguided"), (after, title)]):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.scatter(x[:, 0].numpy(), x[:, 1].numpy(), s=3)
        ax.set_title(name)
        ax.set_aspect("equal")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def run_sampling(ctx: JobContext) -> dict:
    p = parse_params(SampleParams, ctx.params, prefix="params.")
    if bad := check_reward_shapes(p):
        raise InvalidArgument(bad[0][0], bad[0][1])
    return run_steps(ctx, GuidedSampling(p), checkpoint_every=1,
                     message=lambda done, total: f"iteration {done}/{total}")

