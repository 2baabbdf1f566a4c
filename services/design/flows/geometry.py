"""SO(3) helpers over roma: the exponential and logarithm maps between so(3) (as 3-vectors in the body frame) and
rotation matrices, quaternions for storage, and the checks every iterate must pass."""
from __future__ import annotations

import roma
import torch


def exp(omega: torch.Tensor) -> torch.Tensor:
    """so(3) vector(s) [..., 3] -> rotation matrices [..., 3, 3] (Rodrigues, differentiable)."""
    return roma.rotvec_to_rotmat(omega)


def log(R: torch.Tensor) -> torch.Tensor:
    """Rotation matrices [..., 3, 3] -> so(3) vectors [..., 3] (angle in [0, pi])."""
    return roma.rotmat_to_rotvec(R)


def to_quat(R: torch.Tensor) -> torch.Tensor:
    """Rotation matrices -> unit quaternions (x, y, z, w: roma's convention), sign fixed so w >= 0."""
    q = roma.rotmat_to_unitquat(R)
    return torch.where(q[..., 3:4] < 0, -q, q)


def from_quat(q: torch.Tensor) -> torch.Tensor:
    return roma.unitquat_to_rotmat(q / q.norm(dim=-1, keepdim=True))


def uniform(n: int, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """Haar-uniform rotations: normalised Gaussian quaternions (seeded)."""
    q = torch.randn(n, 4, generator=generator, dtype=torch.float64)
    return from_quat(q).to(dtype)


def orthogonality_error(R: torch.Tensor) -> torch.Tensor:
    """max over the batch of ||R^T R - I|| (Frobenius)."""
    eye = torch.eye(3, dtype=R.dtype)
    return (R.transpose(-1, -2) @ R - eye).flatten(-2).norm(dim=-1).max()


def geodesic(R1: torch.Tensor, R2: torch.Tensor) -> torch.Tensor:
    return roma.rotmat_geodesic_distance(R1, R2)
