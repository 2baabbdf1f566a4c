"""L2-regularised linear models over features: the strongly convex, smooth objectives that certified
unlearning applies to.

    F_S(theta) = (1/n) sum_i loss(theta; x_i, y_i) + (mu/2) ||theta||^2,   theta = (W [C, D], b [C])

Kinds (model config "kind"):
  logreg_l2   binary logistic regression, C = 1, y in {0, 1}
  softmax_l2  multinomial logistic regression (C classes), y in {0..C-1}; also the moderation guard's
              "frozen_linear" heads (a linear head over frozen encoder features)
  ridge_l2    least squares, C = 1, real y (the paper's own synthetic regime)
Both W and b are regularised, so F is mu-strongly convex in all of theta. Smoothness constants with
x~ = [x, 1]:  logistic L = max||x~||^2/4 + mu;  softmax L = max||x~||^2/2 + mu (the softmax
cross-entropy Hessian in the logits is diag(p) - pp^T, spectral norm <= 1/2);  ridge L = max||x~||^2 + mu.
All arithmetic is float64: the certificate rests on gradient norms around mu*r.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from services.common.errors import FailedPrecondition, InvalidArgument

CONVEX_KINDS = ("logreg_l2", "softmax_l2", "ridge_l2")
KIND_ALIASES = {"frozen_linear": "softmax_l2"}
DTYPE = torch.float64


def canonical_kind(kind: str) -> str:
    return KIND_ALIASES.get(kind, kind)


def is_convex_kind(kind: str) -> bool:
    return canonical_kind(kind) in CONVEX_KINDS


@dataclass(frozen=True)
class LinearProblem:
    kind: str
    mu: float
    dim: int
    num_outputs: int

    def __post_init__(self) -> None:
        if self.kind not in CONVEX_KINDS:
            raise FailedPrecondition(f"model kind {self.kind!r} is not a supported strongly convex kind "
                                     f"({', '.join(CONVEX_KINDS)})")
        if not self.mu > 0:
            raise InvalidArgument("mu", "must be > 0 (the L2 regularisation makes the objective strongly convex)")
        if self.kind != "softmax_l2" and self.num_outputs != 1:
            raise InvalidArgument("num_classes", f"{self.kind} has one output")
        if self.kind == "softmax_l2" and self.num_outputs < 2:
            raise InvalidArgument("num_classes", "softmax_l2 needs at least 2 classes")

    @property
    def num_params(self) -> int:
        return self.num_outputs * (self.dim + 1)

    # ---- parameters -------------------------------------------------------------------------------
    def zeros(self) -> torch.Tensor:
        return torch.zeros(self.num_params, dtype=DTYPE)

    def unflatten(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c, d = self.num_outputs, self.dim
        return theta[: c * d].view(c, d), theta[c * d:]

    def flatten(self, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        W = W.to(DTYPE).reshape(self.num_outputs, self.dim)
        b = b.to(DTYPE).reshape(self.num_outputs)
        return torch.cat([W.reshape(-1), b])

    def to_tensors(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        W, b = self.unflatten(theta)
        return {"W": W.to(torch.float32).contiguous(), "b": b.to(torch.float32).contiguous()}

    def from_tensors(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        if "W" not in tensors or "b" not in tensors:
            raise FailedPrecondition("linear model weights must hold tensors 'W' [C, D] and 'b' [C]")
        W, b = tensors["W"], tensors["b"]
        if tuple(W.shape) != (self.num_outputs, self.dim) or tuple(b.shape) != (self.num_outputs,):
            raise FailedPrecondition(f"weights have shapes W{tuple(W.shape)} b{tuple(b.shape)}, expected "
                                     f"W({self.num_outputs}, {self.dim}) b({self.num_outputs},)")
        return self.flatten(W, b)

    # ---- data -------------------------------------------------------------------------------------
    def check_data(self, X: torch.Tensor, y: torch.Tensor, field: str = "dataset") -> tuple[torch.Tensor, torch.Tensor]:
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise InvalidArgument(field, f"features must be [n, {self.dim}], got {list(X.shape)}")
        if y.shape[0] != X.shape[0]:
            raise InvalidArgument(field, "labels and features differ in length")
        X = X.to(DTYPE)
        if self.kind == "softmax_l2":
            y = y.to(torch.int64)
            if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.num_outputs):
                raise InvalidArgument(field, f"labels must be in [0, {self.num_outputs})")
        elif self.kind == "logreg_l2":
            y = y.to(DTYPE)
            if y.numel() and not bool(((y == 0) | (y == 1)).all()):
                raise InvalidArgument(field, "logreg_l2 labels must be 0 or 1")
        else:
            y = y.to(DTYPE)
        return X, y

    # ---- objective --------------------------------------------------------------------------------
    def logits(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        W, b = self.unflatten(theta)
        return X @ W.T + b

    def residual(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """d loss_i / d logits_i, [n, C]."""
        z = self.logits(theta, X)
        if self.kind == "logreg_l2":
            return torch.sigmoid(z) - y[:, None]
        if self.kind == "softmax_l2":
            return torch.softmax(z, dim=1) - F.one_hot(y, self.num_outputs).to(DTYPE)
        return z - y[:, None]

    def per_example_loss(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = self.logits(theta, X)
        if self.kind == "logreg_l2":
            return F.softplus(z[:, 0]) - y * z[:, 0]
        if self.kind == "softmax_l2":
            return torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]
        return 0.5 * (z[:, 0] - y) ** 2

    def objective(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
        return float(self.per_example_loss(theta, X, y).mean() + 0.5 * self.mu * theta.dot(theta))

    def gradient(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Full gradient of F on (X, y): costs len(X) per-example gradient evaluations."""
        R = self.residual(theta, X, y)
        n = max(X.shape[0], 1)
        gW = R.T @ X / n
        gb = R.sum(0) / n
        return torch.cat([gW.reshape(-1), gb]) + self.mu * theta

    def per_example_grads(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Loss gradients (no regulariser), [n, P] in the flat parameter order."""
        R = self.residual(theta, X, y)
        gW = (R[:, :, None] * X[:, None, :]).reshape(X.shape[0], -1)
        return torch.cat([gW, R], dim=1)

    def smoothness(self, X: torch.Tensor) -> float:
        sq = float((X.to(DTYPE) ** 2).sum(1).max()) + 1.0 if X.shape[0] else 1.0
        factor = {"logreg_l2": 0.25, "softmax_l2": 0.5, "ridge_l2": 1.0}[self.kind]
        return factor * sq + self.mu

    # ---- utility ----------------------------------------------------------------------------------
    def predict(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        z = self.logits(theta, X.to(DTYPE))
        if self.kind == "logreg_l2":
            return (z[:, 0] > 0).to(torch.int64)
        if self.kind == "softmax_l2":
            return z.argmax(1)
        return z[:, 0]

    def utility(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        X, y = self.check_data(X, y)
        if X.shape[0] == 0:
            return {}
        pred = self.predict(theta, X)
        out = {"loss": float(self.per_example_loss(theta, X, y).mean())}
        if self.kind == "ridge_l2":
            out["mse"] = float(((pred - y) ** 2).mean())
        else:
            out["accuracy"] = float((pred == y.to(torch.int64)).to(DTYPE).mean())
        return out


def problem_from_config(config: dict, *, mu: float | None = None,
                        tensors: dict[str, torch.Tensor] | None = None) -> LinearProblem:
    """The LinearProblem a model config describes. Config keys: kind, mu, feature_dim, num_classes (the last
    two default to the weights' shapes, e.g. for a moderation "frozen_linear" head)."""
    kind = canonical_kind(str(config.get("kind", "")))
    if kind not in CONVEX_KINDS:
        raise FailedPrecondition(f"model kind {config.get('kind')!r} is not strongly convex")
    mu_val = mu if mu is not None else config.get("mu")
    if mu_val is None:
        raise FailedPrecondition(f"model kind {config.get('kind')!r} has no L2 regularisation 'mu' in its config: "
                                 "pass params.mu to certify it")
    W = (tensors or {}).get("W")
    dim = config.get("feature_dim", None if W is None else W.shape[-1])
    if dim is None:
        raise FailedPrecondition("linear model config needs 'feature_dim'")
    if kind == "softmax_l2":
        c = int(config.get("num_classes", 0) or (W.shape[0] if W is not None else 0))
    else:
        c = 1
    return LinearProblem(kind=kind, mu=float(mu_val), dim=int(dim), num_outputs=c)
