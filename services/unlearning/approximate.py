"""Approximate unlearning for any torch nn.Module (non-convex models): UNCERTIFIED.

Nothing here carries a guarantee: the outputs are only audited (membership inference, utility against
retraining). Methods, all minibatch SGD with an explicit torch.Generator so a resumed run replays exactly:
  noisy_finetune   fine-tune on the retain set from the current weights, adding N(0, noise_std^2) to every
                   parameter after each step (Langevin-style noisy descent)
  finetune         the same without noise (baseline)
  gradient_ascent  ascend the loss on the forget set (baseline; degrades utility quickly)
  retrain          re-initialise and train on the retain set (gold standard; the most expensive)
Cost is counted in per-example gradient evaluations (batch size per step).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import torch
from torch import nn

from services.common.errors import FailedPrecondition, InvalidArgument
from services.unlearning.linear import canonical_kind, is_convex_kind

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (outputs, targets) -> mean loss
METHODS = ("noisy_finetune", "finetune", "gradient_ascent", "retrain")


@dataclass
class SGDState:
    """Where a run of `sgd` stands: enough to continue it exactly (the parameters and the generator's state)."""
    step: int
    grad_evals: int
    params: dict[str, torch.Tensor]
    rng_state: torch.Tensor
    last_loss: float = math.nan

    def to_dict(self) -> dict:
        return {"step": self.step, "grad_evals": self.grad_evals, "params": self.params, "rng_state": self.rng_state,
                "last_loss": None if math.isnan(self.last_loss) else self.last_loss}

    @classmethod
    def from_dict(cls, d: dict) -> "SGDState":
        last = d.get("last_loss")
        return cls(step=int(d["step"]), grad_evals=int(d["grad_evals"]), params=d["params"], rng_state=d["rng_state"],
                   last_loss=math.nan if last is None else float(last))


@dataclass
class ApproxResult:
    method: str
    steps: int
    grad_evals: int
    final_loss: float
    certified: bool = False
    note: str = "uncertified: approximate unlearning for non-convex models, audited only"

    def to_dict(self) -> dict:
        return asdict(self)


def sgd(module: nn.Module, loss_fn: LossFn, X: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float,
        batch_size: int, seed: int, noise_std: float = 0.0, ascent: bool = False, max_grad_norm: float | None = None,
        state: SGDState | None = None, max_iters: int | None = None) -> SGDState:
    """Plain minibatch SGD (descent or ascent) with optional parameter noise, in place on `module`, up to `steps`
    steps. Resumable in chunks: it runs at most `max_iters` more steps and returns the state, from which a later
    call (in this process or a fresh one) continues exactly as an uninterrupted run."""
    if X.shape[0] == 0:
        raise InvalidArgument("forget_record_ids" if ascent else "dataset", "no examples to train on")
    if steps < 0 or lr <= 0 or batch_size <= 0:
        raise InvalidArgument("params", "steps >= 0, lr > 0 and batch_size > 0 are required")
    g = torch.Generator()
    g.manual_seed(int(seed))
    step, evals, last = 0, 0, math.nan
    if state is not None:
        module.load_state_dict(state.params)
        g.set_state(state.rng_state)
        step, evals, last = state.step, state.grad_evals, state.last_loss
    params = [p for p in module.parameters() if p.requires_grad]
    n = X.shape[0]
    bs = min(batch_size, n)
    stop = steps if max_iters is None else min(steps, step + max_iters)
    module.train()
    while step < stop:
        idx = torch.randint(n, (bs,), generator=g)
        module.zero_grad(set_to_none=True)
        loss = loss_fn(module(X[idx]), y[idx])
        loss.backward()
        evals += bs
        last = float(loss.detach())
        if not math.isfinite(last):
            raise FailedPrecondition("approximate unlearning diverged (non-finite loss): lower lr")
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        sign = 1.0 if ascent else -1.0
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=sign * lr)
                if noise_std > 0:
                    p.add_(noise_std * torch.randn(p.shape, generator=g, dtype=p.dtype))
        step += 1
    module.eval()
    return SGDState(step=step, grad_evals=evals, params={k: v.detach().clone() for k, v in module.state_dict().items()},
                    rng_state=g.get_state(), last_loss=last)


def reset_parameters(module: nn.Module, seed: int) -> None:
    """Re-initialise every submodule that knows how (for retraining from scratch), reproducibly."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for m in module.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()


def run_method(method: str, module: nn.Module, loss_fn: LossFn, *, retain: tuple[torch.Tensor, torch.Tensor],
               forget: tuple[torch.Tensor, torch.Tensor], steps: int, lr: float, batch_size: int, seed: int,
               noise_std: float = 0.0, state: SGDState | None = None, max_iters: int | None = None) -> SGDState:
    """Run one of METHODS in place on `module`, resumable in chunks like `sgd` (state / max_iters); the run is
    done when the returned state's step reaches `steps`."""
    if method not in METHODS:
        raise InvalidArgument("method", f"unknown approximate method {method!r}; one of {', '.join(METHODS)}")
    if method == "noisy_finetune" and noise_std <= 0:
        raise InvalidArgument("noise_std", "noisy_finetune needs noise_std > 0")
    kw = dict(steps=steps, lr=lr, batch_size=batch_size, seed=seed, state=state, max_iters=max_iters)
    if method == "retrain" and state is None:
        reset_parameters(module, seed)
    if method == "gradient_ascent":
        return sgd(module, loss_fn, *forget, ascent=True, max_grad_norm=5.0, **kw)
    return sgd(module, loss_fn, *retain, noise_std=noise_std if method == "noisy_finetune" else 0.0, **kw)


def approx_result(method: str, state: SGDState) -> ApproxResult:
    note = ("gold standard: retrained from scratch on the retain set (exact, not approximate)"
            if method == "retrain" else ApproxResult.note)
    return ApproxResult(method=method, steps=state.step, grad_evals=state.grad_evals, final_loss=state.last_loss,
                        certified=False, note=note)


def unlearn_approximate(method: str, module: nn.Module, loss_fn: LossFn, *, retain: tuple[torch.Tensor, torch.Tensor],
                        forget: tuple[torch.Tensor, torch.Tensor], steps: int, lr: float, batch_size: int, seed: int,
                        noise_std: float = 0.0) -> ApproxResult:
    """Run one of METHODS in place on `module`, in one go."""
    st = run_method(method, module, loss_fn, retain=retain, forget=forget, steps=steps, lr=lr, batch_size=batch_size,
                    seed=seed, noise_std=noise_std)
    return approx_result(method, st)


# ---- modules for registered model kinds ---------------------------------------------------------------
class MLPClassifier(nn.Module):
    """The one non-convex kind this service can rebuild by itself ("mlp_classifier"): config
    {"feature_dim": D, "hidden": [h1, ...], "num_classes": C}; tensors are its state_dict."""

    def __init__(self, feature_dim: int, hidden: list[int], num_classes: int):
        super().__init__()
        layers: list[nn.Module] = []
        d = feature_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.Tanh()]
            d = h
        layers.append(nn.Linear(d, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LinearHead(nn.Module):
    """A linear model kind (W [C, D], b [C]) as a module, so the approximate baselines run on it too."""

    def __init__(self, kind: str, W: torch.Tensor, b: torch.Tensor, mu: float):
        super().__init__()
        self.kind = kind
        self.mu = mu
        self.W = nn.Parameter(W.detach().clone().to(torch.float64))
        self.b = nn.Parameter(b.detach().clone().to(torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64) @ self.W.T + self.b

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.kind == "logreg_l2":
            base = nn.functional.binary_cross_entropy_with_logits(out[:, 0], y.to(out.dtype))
        elif self.kind == "softmax_l2":
            base = nn.functional.cross_entropy(out, y.to(torch.int64))
        else:
            base = 0.5 * ((out[:, 0] - y.to(out.dtype)) ** 2).mean()
        return base + 0.5 * self.mu * (self.W.pow(2).sum() + self.b.pow(2).sum())


ModuleBuilder = Callable[[dict[str, torch.Tensor], dict], tuple[nn.Module, LossFn]]
MODULE_BUILDERS: dict[str, ModuleBuilder] = {}


def register_module_builder(kind: str, builder: ModuleBuilder) -> None:
    """Let a deployment plug in other model kinds (built from (tensors, config) -> (module, loss_fn)).
    Services never import each other, so e.g. a recommendation model's builder is registered by the worker."""
    MODULE_BUILDERS[kind] = builder


def _build_mlp(tensors: dict[str, torch.Tensor], config: dict) -> tuple[nn.Module, LossFn]:
    m = MLPClassifier(int(config["feature_dim"]), [int(h) for h in config.get("hidden", [])],
                      int(config["num_classes"]))
    m.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()})
    return m, nn.functional.cross_entropy


register_module_builder("mlp_classifier", _build_mlp)


def build_module(tensors: dict[str, torch.Tensor], config: dict) -> tuple[nn.Module, LossFn]:
    kind = str(config.get("kind", ""))
    if is_convex_kind(kind):
        head = LinearHead(canonical_kind(kind), tensors["W"], tensors["b"], float(config.get("mu", 0.0)))
        return head, head.loss
    if kind not in MODULE_BUILDERS:
        raise FailedPrecondition(f"no torch module builder is registered for model kind {kind!r}; "
                                 f"known: {', '.join(sorted(MODULE_BUILDERS))}")
    return MODULE_BUILDERS[kind](tensors, config)


def module_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    if isinstance(module, LinearHead):
        return {"W": module.W.detach().to(torch.float32).clone(), "b": module.b.detach().to(torch.float32).clone()}
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def per_example_loss_fn(module: nn.Module, loss_fn: LossFn) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Per-example losses for the membership-inference audit (regulariser excluded)."""

    def f(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = module(X)
            if isinstance(module, LinearHead):
                if module.kind == "logreg_l2":
                    return nn.functional.binary_cross_entropy_with_logits(out[:, 0], y.to(out.dtype), reduction="none")
                if module.kind == "softmax_l2":
                    return nn.functional.cross_entropy(out, y.to(torch.int64), reduction="none")
                return 0.5 * (out[:, 0] - y.to(out.dtype)) ** 2
            try:
                per = loss_fn(out, y, reduction="none")  # torch.nn.functional losses
                if per.shape[:1] == (X.shape[0],):
                    return per.reshape(X.shape[0], -1).mean(1)
            except TypeError:
                pass
            return torch.stack([loss_fn(out[i:i + 1], y[i:i + 1]) for i in range(X.shape[0])])

    return f


def accuracy(module: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        out = module(X)
        pred = (out[:, 0] > 0).long() if out.shape[1] == 1 else out.argmax(1)
        return float((pred == y.long()).float().mean())
