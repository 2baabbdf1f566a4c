"""Sampling a flow, plain or guided toward a reward by optimal control (OC-Flow, Wang et al., ICLR 2025).

The controlled dynamics dz/dt = v(z, t) + u(t) are discretised with explicit Euler on a uniform grid
t_k = k / N: z_{k+1} = z_k + dt (v(z_k, t_k) + u_k). The objective (per sample) is
    J(u) = -R(z_N) + (lambda / 2) sum_k dt ||u_k||^2.
Its exact gradient through the discrete steps comes from the costate: p_N = -grad R(z_N), and for
k = N-1 .. 0 one vector-Jacobian product through the step map gives p_k = p_{k+1} + dt J_v(z_k)^T p_{k+1}, while
dJ/du_k = dt (p_{k+1} + lambda u_k) (the step size is kept: the released code drops it, autograd is the judge).
The control update is gradient descent on the functional gradient p + lambda u:
    OC-Flow    u_k <- (1 - lr lambda) u_k - lr p_{k+1}     (the decay 1 - lr lambda is the control cost's gradient)
    FlowGrad   u_k <- u_k - lr p_{k+1}                      (per-step kicks, no control cost)
    D-Flow     z_0 <- z_0 - lr (p_0 + lambda (z_0 - z_0^init))  (only the initial noise; lambda = 0 is D-Flow as
               published, lambda > 0 adds the cost of an impulse control at t = 0)
On SO(3): R_{k+1} = R_k Exp(dt (omega(R_k, t_k) + u_k)) with u_k in so(3) (body frame), so every iterate is a
product of exponentials and stays on the group. The costate is carried as the ambient gradient dJ/dR_k and pulled
back through each step by a VJP; its component along u_k is the left-trivialised (Lie algebra) costate times dt.
Unguided sampling is the same simulation with no control (torchdiffeq's Euler on the same grid)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torchdiffeq import odeint

from services.design.flows import geometry as so3

METHODS = ("oc_flow", "d_flow", "flowgrad", "unguided")


def time_grid(steps: int, dtype=torch.float32) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, steps + 1, dtype=dtype)


# --------------------------------------------------------------------------------------------------- Euclidean
def sample_plain(flow, z0: torch.Tensor, steps: int) -> torch.Tensor:
    """Unguided samples: torchdiffeq's fixed-grid Euler solve of dz/dt = v(z, t) from z0."""
    with torch.no_grad():
        return odeint(lambda t, z: flow(z, t), z0, time_grid(steps, z0.dtype), method="euler")[-1]


def simulate(flow, z0: torch.Tensor, u: torch.Tensor | None, ts: torch.Tensor) -> list[torch.Tensor]:
    """The controlled Euler trajectory [z_0 .. z_N] (no graph)."""
    traj = [z0]
    z = z0
    with torch.no_grad():
        for k in range(len(ts) - 1):
            dt = ts[k + 1] - ts[k]
            vel = flow(z, ts[k])
            z = z + dt * (vel if u is None else vel + u[k])
            traj.append(z)
    return traj


def objective(flow, reward, z0: torch.Tensor, u: torch.Tensor, ts: torch.Tensor, lam: float) -> torch.Tensor:
    """J summed over the batch, differentiable end to end (the autograd reference for the adjoint)."""
    z = z0
    cost = torch.zeros((), dtype=z0.dtype)
    for k in range(len(ts) - 1):
        dt = ts[k + 1] - ts[k]
        z = z + dt * (flow(z, ts[k]) + u[k])
        cost = cost + 0.5 * lam * dt * (u[k] ** 2).sum()
    return -reward(z).sum() + cost


def terminal_costate(reward, zN: torch.Tensor) -> torch.Tensor:
    x = zN.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(reward(x).sum(), x)
    return -g


def adjoint(flow, reward, traj: list[torch.Tensor], u: torch.Tensor | None, ts: torch.Tensor, lam: float
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(dJ/du [N, n, d], costates [p_0 .. p_N]) by backward VJPs through each discrete step."""
    N = len(ts) - 1
    p = terminal_costate(reward, traj[-1])
    costates = [p]
    grads = torch.zeros((N, *traj[0].shape), dtype=traj[0].dtype)
    for k in range(N - 1, -1, -1):
        dt = ts[k + 1] - ts[k]
        grads[k] = dt * p if u is None else dt * (p + lam * u[k])
        z = traj[k].detach().requires_grad_(True)
        with torch.enable_grad():
            step = z + dt * flow(z, ts[k])  # + dt u_k: constant in z
            (p,) = torch.autograd.grad(step, z, grad_outputs=p)
        costates.append(p)
    costates.reverse()
    return grads, costates


@dataclass
class IterStats:
    reward: float
    control_cost: float


class EuclideanGuide:
    """One method's optimisation state: controls u [N, n, d] (OC-Flow, FlowGrad) or the start z0 (D-Flow)."""

    def __init__(self, flow, reward, z0: torch.Tensor, *, steps: int, lam: float, lr: float, method: str):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}")
        self.flow, self.reward, self.method = flow, reward, method
        self.lam, self.lr = float(lam), float(lr)
        self.ts = time_grid(steps, z0.dtype)
        self.z0_init = z0.clone()
        self.z0 = z0.clone()
        self.u = torch.zeros((steps, *z0.shape), dtype=z0.dtype)

    def controls(self) -> torch.Tensor | None:
        return self.u if self.method in ("oc_flow", "flowgrad") else None

    def samples(self) -> torch.Tensor:
        return simulate(self.flow, self.z0, self.controls(), self.ts)[-1]

    def control_cost(self) -> float:
        if self.method == "d_flow":
            return float(0.5 * ((self.z0 - self.z0_init) ** 2).sum(-1).mean())
        dt = self.ts[1:] - self.ts[:-1]
        return float(0.5 * (dt[:, None] * (self.u ** 2).sum(-1)).sum(0).mean())

    def iterate(self) -> None:
        if self.method == "unguided":
            return
        traj = simulate(self.flow, self.z0, self.controls(), self.ts)
        grads, costates = adjoint(self.flow, self.reward, traj, self.controls(), self.ts, self.lam)
        if self.method == "d_flow":
            self.z0 = self.z0 - self.lr * (costates[0] + self.lam * (self.z0 - self.z0_init))
            return
        p_next = torch.stack(costates[1:])  # p_{k+1} for k = 0 .. N-1
        decay = 1.0 - self.lr * self.lam if self.method == "oc_flow" else 1.0
        self.u = decay * self.u - self.lr * p_next

    def state(self) -> dict:
        return {"u": self.u, "z0": self.z0}

    def load_state(self, state: dict) -> None:
        self.u, self.z0 = state["u"], state["z0"]


# ------------------------------------------------------------------------------------------------------- SO(3)
def so3_step(flow, R: torch.Tensor, u_k: torch.Tensor | None, t, dt) -> torch.Tensor:
    omega = flow(R, t)
    return R @ so3.exp(dt * (omega if u_k is None else omega + u_k))


def so3_simulate(flow, R0: torch.Tensor, u: torch.Tensor | None, ts: torch.Tensor) -> list[torch.Tensor]:
    traj = [R0]
    R = R0
    with torch.no_grad():
        for k in range(len(ts) - 1):
            R = so3_step(flow, R, None if u is None else u[k], ts[k], ts[k + 1] - ts[k])
            traj.append(R)
    return traj


def so3_objective(flow, reward, R0: torch.Tensor, u: torch.Tensor, ts: torch.Tensor, lam: float) -> torch.Tensor:
    R = R0
    cost = torch.zeros((), dtype=R0.dtype)
    for k in range(len(ts) - 1):
        dt = ts[k + 1] - ts[k]
        R = so3_step(flow, R, u[k], ts[k], dt)
        cost = cost + 0.5 * lam * dt * (u[k] ** 2).sum()
    return -reward(R).sum() + cost


def so3_adjoint(flow, reward, traj: list[torch.Tensor], u: torch.Tensor, ts: torch.Tensor, lam: float
                ) -> torch.Tensor:
    """dJ/du [N, n, 3] by backward VJPs through each step R_{k+1} = R_k Exp(dt (omega + u_k))."""
    N = len(ts) - 1
    P = terminal_costate(reward, traj[-1])  # ambient dJ/dR_N
    grads = torch.zeros_like(u)
    for k in range(N - 1, -1, -1):
        dt = ts[k + 1] - ts[k]
        R = traj[k].detach().requires_grad_(True)
        uk = u[k].detach().requires_grad_(True)
        with torch.enable_grad():
            nxt = so3_step(flow, R, uk, ts[k], dt)
            P, gu = torch.autograd.grad(nxt, (R, uk), grad_outputs=P)
        grads[k] = gu + lam * dt * u[k]
    return grads


class SO3Guide:
    """OC-Flow on SO(3) (and FlowGrad: no decay). D-Flow on SO(3) optimises a start perturbation R0 Exp(w).
    on_iterate, when given, sees the trajectory [R_0 .. R_N] that every iteration (of every method) starts from."""

    def __init__(self, flow, reward, R0: torch.Tensor, *, steps: int, lam: float, lr: float, method: str,
                 on_iterate: Callable[[list[torch.Tensor]], None] | None = None):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}")
        self.flow, self.reward, self.method = flow, reward, method
        self.lam, self.lr = float(lam), float(lr)
        self.ts = time_grid(steps, R0.dtype)
        self.R0_init = R0.clone()
        self.w = torch.zeros(R0.shape[0], 3, dtype=R0.dtype)  # D-Flow: R0 = R0_init Exp(w)
        self.u = torch.zeros(steps, R0.shape[0], 3, dtype=R0.dtype)
        self.on_iterate = on_iterate

    @property
    def R0(self) -> torch.Tensor:
        return self.R0_init @ so3.exp(self.w)

    def trajectory(self) -> list[torch.Tensor]:
        u = self.u if self.method in ("oc_flow", "flowgrad") else None
        return so3_simulate(self.flow, self.R0, u, self.ts)

    def samples(self) -> torch.Tensor:
        return self.trajectory()[-1]

    def control_cost(self) -> float:
        if self.method == "d_flow":
            return float(0.5 * (self.w ** 2).sum(-1).mean())
        dt = self.ts[1:] - self.ts[:-1]
        return float(0.5 * (dt[:, None] * (self.u ** 2).sum(-1)).sum(0).mean())

    def iterate(self) -> None:
        if self.method == "unguided":
            return
        if self.method == "d_flow":
            if self.on_iterate is not None:
                self.on_iterate(self.trajectory())
            w = self.w.detach().requires_grad_(True)
            with torch.enable_grad():
                R = self.R0_init @ so3.exp(w)
                J = so3_objective(self.flow, self.reward, R, torch.zeros_like(self.u), self.ts, 0.0)
                J = J + 0.5 * self.lam * (w ** 2).sum()
                (g,) = torch.autograd.grad(J, w)
            self.w = self.w - self.lr * g
            return
        traj = self.trajectory()
        if self.on_iterate is not None:
            self.on_iterate(traj)
        dt = (self.ts[1:] - self.ts[:-1])[:, None, None]
        grads = so3_adjoint(self.flow, self.reward, traj, self.u, self.ts, self.lam)
        reward_part = grads / dt - self.lam * self.u  # the reward's functional gradient, p_{k+1} in so(3)
        decay = 1.0 - self.lr * self.lam if self.method == "oc_flow" else 1.0
        self.u = decay * self.u - self.lr * reward_part

    def state(self) -> dict:
        return {"u": self.u, "w": self.w}

    def load_state(self, state: dict) -> None:
        self.u, self.w = state["u"], state["w"]


# --------------------------------------------------------------------------------------------- on-support stats
def flow_log_density(flow, x1: torch.Tensor, steps: int) -> torch.Tensor:
    """log p_1(x) of a Euclidean flow: analytic when the flow knows its density, else the instantaneous change of
    variables integrated backward with Euler on the sampling grid (exact divergence by d VJPs)."""
    if hasattr(flow, "log_prob"):
        with torch.no_grad():
            return flow.log_prob(x1)
    ts = time_grid(steps, x1.dtype)
    x = x1.detach()
    div_int = torch.zeros(x.shape[0], dtype=x.dtype)
    for k in range(steps, 0, -1):
        dt = ts[k] - ts[k - 1]
        xr = x.detach().requires_grad_(True)
        with torch.enable_grad():
            v = flow(xr, ts[k])
            div = torch.zeros(x.shape[0], dtype=x.dtype)
            for i in range(x.shape[1]):
                (g,) = torch.autograd.grad(v[:, i].sum(), xr, retain_graph=i < x.shape[1] - 1)
                div = div + g[:, i]
        div_int = div_int + dt * div.detach()
        x = (x - dt * v).detach()
    d = x.shape[1]
    logp0 = -0.5 * (x ** 2).sum(-1) - 0.5 * d * torch.log(torch.tensor(2 * torch.pi, dtype=x.dtype))
    return logp0 - div_int


def so3_nn_distance(R: torch.Tensor, ref: torch.Tensor, exclude_self: bool = False) -> torch.Tensor:
    """Geodesic distance from each R to its nearest rotation in ref."""
    cos = ((torch.einsum("aij,bij->ab", R, ref) - 1) / 2).clamp(-1, 1)
    d = torch.arccos(cos)
    if exclude_self:
        d = d + torch.diag(torch.full((len(R),), float("inf"), dtype=d.dtype))
    return d.min(1).values
