"""SymmCD's joint diffusion over asymmetric units (after sibasmarak/SymmCD, itself built on DiffCSP), sized for CPU.

Per crystal: space group g (the condition), log-lattice ks (6, masked by g's crystal family); per asymmetric-unit
atom: fractional coordinate x (torus), atom type a (Z = 1..94) and site symmetry s (15 axes x 13 classes).

- lattice: DDPM with the cosine schedule (T steps); the denoiser predicts the masked noise, loss MSE(eps_hat, mask*eps)
- coordinates: wrapped-normal score matching on the torus (geometric sigma schedule 0.005 -> 0.5); target
  d log p_wrapped(sigma eps; sigma) / sqrt(E[|d log p|^2]); predictor-corrector sampling (DiffCSP's)
- atom types and site symmetries: discrete diffusion (D3PM) with marginal transition matrices
  Q_t = alpha_t I + (1 - alpha_t) 1 m^T, m the training marginal of atom types and, for site symmetries, the
  per-space-group marginal of each axis; the denoiser predicts x_0 (cross entropy), sampling uses the posterior
  q(x_{t-1} | x_t, x_0) summed over the predicted x_0
- loss = 5 L_lattice + 1 L_coord + 0.1 L_type + 10 L_symm (shared/algorithms/design.md; configurable)
- sampling draws g and the number of asymmetric-unit atoms from the training set's empirical distributions (the
  paper samples them from the training set); an untrained model has uniform ones.
- sampling visits all T timesteps, or `steps` of them spaced evenly (strided ancestral sampling: DDPM on a
  subsequence of timesteps, DDIM with eta = 1). Each jump t -> s uses the forward process's exact marginals between
  s and t: lattice, the Gaussian posterior q(k_s | k_t, k0_hat); coordinates, the variance-exploding reverse step
  from sigma_t to sigma_s; types and site symmetries, the D3PM posterior with Q_{t|s} = (ac_t / ac_s) I +
  (1 - ac_t / ac_s) 1 m^T. With steps = T (the default) it is the usual one-step-at-a-time sampler.
- the lattice's predicted k0_hat = (k_t - sqrt(1 - ac_t) eps_hat) / sqrt(ac_t) is clipped to the training set's
  per-coefficient range plus a margin before each posterior step (DDPM's clip of the predicted x0): near t = T,
  1 / sqrt(ac_t) is ~1e4, and an unclipped prediction error there becomes a degenerate cell.

Simplifications: see SIMPLIFICATIONS below (said here and, as `model_notes`, in every generation report's
summary)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from services.design.crystals import representation as R

N_TYPES = R.MAX_Z
N_AX, N_CL = R.N_AXES, R.N_CLASSES
N_SG = R.N_SPACEGROUPS + 1  # index = space group number (0 unused)
KS_BOUND = 5.0  # |log-lattice coefficient| kept below this while sampling (lengths ~ exp(k5))
KS_MARGIN = 0.1  # the clip range of the predicted lattice: the training range widened by this + 10% of its width
SIMPLIFICATIONS = (
    "simplified SymmCD: the denoiser is a small dense message-passing network over the asymmetric unit (CSPNet-like "
    "edges on relative fractional Fourier features and the invariant log-lattice, plus absolute Fourier features "
    "because the space group fixes the origin), not the paper's CSPNet on the full graph; the space group enters as "
    "a learned embedding of its number and crystal family, not the paper's 397-dim symmetry-operation encoding; "
    "the predicted lattice is clipped to the training range while sampling; the CPU setting (the training job's "
    "defaults) is T=200, hidden 64, 3 layers, 1500 steps, the GPU setting T=1000 as in the paper; sampling may visit "
    "a strided subset of the T timesteps; with a fixed formula, types and site symmetries are held by inpainting")
FAMILIES = ("triclinic", "monoclinic", "orthorhombic", "tetragonal", "hexagonal", "cubic")


@dataclass(frozen=True)
class ModelConfig:
    hidden: int = 64
    layers: int = 3
    freqs: int = 4
    timesteps: int = 1000
    sigma_begin: float = 0.005
    sigma_end: float = 0.5
    cost_lattice: float = 5.0
    cost_coord: float = 1.0
    cost_type: float = 0.1
    cost_symm: float = 10.0
    max_asym: int = 16  # data.MAX_ASYM_ATOMS (the P1 model uses data.MAX_CELL_ATOMS)
    symmetric: bool = True  # False: the P1 baseline (every crystal expanded to its full cell in P1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# ----------------------------------------------------------------------------------------------- schedules
def cosine_betas(T: int, s: float = 0.008) -> torch.Tensor:
    steps = torch.arange(T + 1, dtype=torch.float64) / T
    f = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
    ac = f / f[0]
    betas = (1 - ac[1:] / ac[:-1]).clamp(1e-4, 0.9999)
    return torch.cat([torch.zeros(1, dtype=torch.float64), betas]).float()  # index 0 = no noise


def wrapped_normal_p(x: torch.Tensor, sigma: torch.Tensor, n: int = 10) -> torch.Tensor:
    i = torch.arange(-n, n + 1, dtype=x.dtype).view(*([1] * x.dim()), -1)
    return torch.exp(-((x.unsqueeze(-1) + i) ** 2) / (2 * sigma.unsqueeze(-1) ** 2)).sum(-1)


def d_log_p_wrapped_normal(x: torch.Tensor, sigma: torch.Tensor, n: int = 10) -> torch.Tensor:
    """-(d/dx) log p_wrapped(x; sigma) (DiffCSP's sign convention: the target the denoiser regresses)."""
    i = torch.arange(-n, n + 1, dtype=x.dtype).view(*([1] * x.dim()), -1)
    xs, sg = x.unsqueeze(-1) + i, sigma.unsqueeze(-1)
    e = torch.exp(-(xs ** 2) / (2 * sg ** 2))
    return (xs / sg ** 2 * e).sum(-1) / e.sum(-1)


class Schedules(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        T = cfg.timesteps
        betas = cosine_betas(T)
        alphas = 1 - betas
        ac = torch.cumprod(alphas, 0)
        post = torch.zeros_like(betas)
        post[1:] = betas[1:] * (1 - ac[:-1]) / (1 - ac[1:])
        sig = torch.cat([torch.zeros(1), torch.exp(torch.linspace(math.log(cfg.sigma_begin), math.log(cfg.sigma_end), T))])
        g = torch.Generator().manual_seed(0)
        norms = [1.0]
        for s in sig[1:]:
            xs = torch.randn(5000, generator=g, dtype=torch.float64) * float(s)
            norms.append(float((d_log_p_wrapped_normal(xs, torch.tensor(float(s), dtype=torch.float64)) ** 2).mean()))
        for name, v in (("betas", betas), ("alphas", alphas), ("alphas_cumprod", ac), ("post_sigmas", post.sqrt()),
                        ("sigmas", sig), ("sigmas_norm", torch.tensor(norms, dtype=torch.float32))):
            self.register_buffer(name, v.float(), persistent=False)


# ----------------------------------------------------------------------------------------------- tensors of a batch
def family_index(sg: int) -> int:
    return FAMILIES.index(R.crystal_family(sg))


@dataclass
class Batch:
    sg: torch.Tensor  # [B] long
    ks: torch.Tensor  # [B, 6]
    z: torch.Tensor  # [B, N] long, class index Z-1 (0 where padded)
    x: torch.Tensor  # [B, N, 3]
    ss: torch.Tensor  # [B, N, 15] long class per axis
    mask: torch.Tensor  # [B, N] bool


def ks_masks(sg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = np.stack([R.ks_mask(int(g))[0] for g in sg.tolist()])
    a = np.stack([R.ks_mask(int(g))[1] for g in sg.tolist()])
    return torch.tensor(m, dtype=torch.float32), torch.tensor(a, dtype=torch.float32)


def to_p1(rep: R.CrystalRep) -> R.CrystalRep:
    """The P1 view of a crystal: every atom of the cell is an asymmetric-unit atom in the general position."""
    s = R.to_structure(rep)
    w = R.wyckoff_table(1)[0]
    atoms = [R.AsymAtom(int(site.specie.Z), np.asarray(site.frac_coords) % 1.0, w.label, w.site_symm) for site in s]
    return R.CrystalRep(1, R.lattice_to_ks(np.asarray(s.lattice.matrix)), atoms, rep.source)


def collate(reps: list[R.CrystalRep]) -> Batch:
    B, N = len(reps), max(len(r.atoms) for r in reps)
    z = torch.zeros(B, N, dtype=torch.long)
    x = torch.zeros(B, N, 3)
    ss = torch.zeros(B, N, N_AX, dtype=torch.long)
    mask = torch.zeros(B, N, dtype=torch.bool)
    for b, r in enumerate(reps):
        for i, a in enumerate(r.atoms):
            z[b, i] = a.z - 1
            x[b, i] = torch.tensor(a.frac, dtype=torch.float32)
            ss[b, i] = torch.tensor(np.asarray(a.site_symm).argmax(-1))
            mask[b, i] = True
    return Batch(torch.tensor([r.space_group for r in reps]), torch.tensor(np.stack([r.ks for r in reps]),
                 dtype=torch.float32), z, x, ss, mask)


# ----------------------------------------------------------------------------------------------- denoiser
def sinusoidal(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    f = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / max(half - 1, 1)))
    e = t.float()[:, None] * f[None, :]
    return torch.cat([e.sin(), e.cos()], -1)


def fourier(x: torch.Tensor, k: int) -> torch.Tensor:
    f = 2 * math.pi * torch.arange(1, k + 1, dtype=x.dtype)
    e = x.unsqueeze(-1) * f
    return torch.cat([e.sin(), e.cos()], -1).flatten(-2)


def mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.SiLU(), nn.Linear(h, o))


class EdgeMLP(nn.Module):
    """m_ij = MLP([h_i, h_j, ks, fourier(x_j - x_i)]), its first layer split by input so the node terms are
    computed once per node rather than once per pair (same function)."""

    def __init__(self, h: int, rel_dim: int):
        super().__init__()
        self.wi, self.wj = nn.Linear(h, h), nn.Linear(h, h, bias=False)
        self.wk, self.wr = nn.Linear(6, h, bias=False), nn.Linear(rel_dim, h, bias=False)
        self.out = nn.Linear(h, h)

    def forward(self, h: torch.Tensor, ks: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        pre = (self.wi(h) + self.wk(ks)[:, None, :])[:, :, None, :] + self.wj(h)[:, None, :, :] + self.wr(rel)
        return self.out(F.silu(pre))


class Denoiser(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, k = cfg.hidden, cfg.freqs
        self.cfg = cfg
        self.type_in = nn.Linear(N_TYPES, h)
        self.symm_in = nn.Linear(N_AX * N_CL, h)
        self.pos_in = nn.Linear(6 * k, h)
        self.sg_emb = nn.Embedding(N_SG, h)
        self.fam_emb = nn.Embedding(len(FAMILIES), h)
        self.ctx = mlp(h + 6, h, h)
        self.edges = nn.ModuleList([EdgeMLP(h, 6 * k) for _ in range(cfg.layers)])
        self.nodes = nn.ModuleList([mlp(2 * h, h, h) for _ in range(cfg.layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(h) for _ in range(cfg.layers)])
        self.coord_out = nn.Linear(h, 3, bias=False)
        self.lattice_out = mlp(h, h, 6)
        self.type_out = nn.Linear(h, N_TYPES)
        self.symm_out = nn.Linear(h, N_AX * N_CL)

    def forward(self, t, sg, fam, ks, a_probs, s_probs, x, mask):
        """t [B], sg/fam [B], ks [B,6], a_probs [B,N,94], s_probs [B,N,15,13], x [B,N,3], mask [B,N] ->
        (lattice eps [B,6], coord score [B,N,3], type logits [B,N,94], symm logits [B,N,15,13])."""
        B, N = mask.shape
        hdim = self.cfg.hidden
        c = self.ctx(torch.cat([sinusoidal(t, hdim) + self.sg_emb(sg) + self.fam_emb(fam), ks], -1))
        m = mask.float()
        h = self.type_in(a_probs) + self.symm_in(s_probs.flatten(-2)) + self.pos_in(fourier(x, self.cfg.freqs)) \
            + c[:, None, :]
        rel = fourier(x[:, None, :, :] - x[:, :, None, :], self.cfg.freqs)  # [B, N, N, 6k], x_j - x_i
        pair = (m[:, :, None] * m[:, None, :]).unsqueeze(-1)
        denom = pair.sum(2).clamp(min=1.0)
        for edge, node, norm in zip(self.edges, self.nodes, self.norms, strict=True):
            e = edge(h, ks, rel)
            agg = (e * pair).sum(2) / denom
            h = norm(h + node(torch.cat([h, agg], -1))) * m[..., None]
        pooled = h.sum(1) / m.sum(1, keepdim=True).clamp(min=1.0)
        return (self.lattice_out(pooled), self.coord_out(h), self.type_out(h),
                self.symm_out(h).view(B, N, N_AX, N_CL))


# ----------------------------------------------------------------------------------------------- SymmCD
def mask_ks_of(rep: R.CrystalRep) -> np.ndarray:
    return R.mask_ks(rep.ks, rep.space_group)


def timesteps_of(T: int, steps: int | None) -> list[int]:
    """The timesteps the sampler visits, descending: all of T..1 when steps is None or >= T, else `steps` of them
    spaced evenly from T down to 1 (rounded; distinct because the spacing is >= 1). Each visited t jumps to the
    next visited one, the last to 0."""
    if steps is None or steps >= T:
        return list(range(T, 0, -1))
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [int(v) for v in np.round(np.linspace(T, 1, steps)).astype(int)]


def _wyckoff_mean(g: int) -> torch.Tensor:
    return torch.tensor(np.stack([w.site_symm for w in R.wyckoff_table(g)]), dtype=torch.float32).mean(0)


class SymmCD(nn.Module):
    """The denoiser plus the data-fitted pieces: atom-type marginal [94], per-space-group site-symmetry marginals
    [231, 15, 13], space-group distribution [231] and asymmetric-unit size distribution per group [231, max+1]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.net = Denoiser(cfg)
        self.sched = Schedules(cfg)
        self.register_buffer("type_prior", torch.full((N_TYPES,), 1.0 / N_TYPES))
        # rows left at zero are filled on first use: uniform over the group's Wyckoff positions (pyxtal's tables
        # for all 230 groups take ~30 s to build, so only the groups a batch needs are built)
        self.register_buffer("symm_prior", torch.zeros(N_SG, N_AX, N_CL))
        sg = torch.ones(N_SG)
        sg[0] = 0
        self.register_buffer("sg_dist", sg / sg.sum())
        na = torch.zeros(N_SG, cfg.max_asym + 1)
        na[:, 1:] = 1.0
        self.register_buffer("n_dist", na / na.sum(-1, keepdim=True))
        # the clip range of the predicted lattice k0_hat while sampling (fitted: the training range plus a margin)
        self.register_buffer("ks_lo", torch.full((6,), -KS_BOUND))
        self.register_buffer("ks_hi", torch.full((6,), KS_BOUND))

    def run_net(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The denoiser on its device (the rest of the model, its schedules, priors and noise, stays on the CPU,
        so seeded draws do not depend on the device): inputs moved there, outputs moved back."""
        dev = next(self.net.parameters()).device
        if dev.type == "cpu":
            return self.net(*args)
        return tuple(o.cpu() for o in self.net(*(a.to(dev) for a in args)))

    # ---- fitting the empirical distributions (the paper's priors and sampling distributions)
    @torch.no_grad()
    def fit_priors(self, reps: list[R.CrystalRep], smoothing: float = 0.1) -> None:
        tc = torch.full((N_TYPES,), smoothing / N_TYPES)
        sc = torch.zeros(N_SG, N_AX, N_CL)
        sgc = torch.zeros(N_SG)
        nc = torch.zeros(N_SG, self.cfg.max_asym + 1)
        for r in reps:
            sgc[r.space_group] += 1
            nc[r.space_group, min(len(r.atoms), self.cfg.max_asym)] += 1
            for a in r.atoms:
                tc[a.z - 1] += 1
                sc[r.space_group] += torch.tensor(np.asarray(a.site_symm), dtype=torch.float32)
        self.type_prior.copy_(tc / tc.sum())
        # per-group site-symmetry marginal: counts plus a pseudo-count on every Wyckoff position of the group
        self.symm_prior.zero_()
        for g in sorted({r.space_group for r in reps}):
            c = sc[g] + smoothing * _wyckoff_mean(g)
            self.symm_prior[g] = c / c.sum(-1, keepdim=True)
        self.sg_dist.copy_(sgc / sgc.sum())
        ks = torch.tensor(np.stack([mask_ks_of(r) for r in reps]), dtype=torch.float32)
        lo, hi = ks.min(0).values, ks.max(0).values
        pad = KS_MARGIN + 0.1 * (hi - lo)
        self.ks_lo.copy_((lo - pad).clamp(min=-KS_BOUND))
        self.ks_hi.copy_((hi + pad).clamp(max=KS_BOUND))
        glob = nc.sum(0)
        for g in range(1, N_SG):
            row = nc[g] if nc[g].sum() > 0 else glob
            self.n_dist[g] = row / row.sum()

    @torch.no_grad()
    def symm_prior_of(self, sg: torch.Tensor) -> torch.Tensor:
        for g in sorted(set(sg.tolist())):
            if float(self.symm_prior[g].sum()) == 0.0:
                self.symm_prior[g] = _wyckoff_mean(g)
        return self.symm_prior[sg]

    # ---- forward noising and the training loss
    def loss(self, b: Batch, gen: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        s, cfg = self.sched, self.cfg
        B, N = b.mask.shape
        t = torch.randint(1, cfg.timesteps + 1, (B,), generator=gen)
        ac = s.alphas_cumprod[t]
        kmask, kadd = ks_masks(b.sg)
        eps_k = torch.randn(B, 6, generator=gen)
        ks_t = (ac.sqrt()[:, None] * b.ks + (1 - ac).sqrt()[:, None] * eps_k) * kmask + kadd
        sig = s.sigmas[t][:, None, None]
        eps_x = torch.randn(B, N, 3, generator=gen)
        x_t = (b.x + sig * eps_x) % 1.0
        # discrete: q(a_t | a_0) = ac a_0 + (1 - ac) m
        a0 = F.one_hot(b.z, N_TYPES).float()
        pa = ac[:, None, None] * a0 + (1 - ac[:, None, None]) * self.type_prior
        a_t = torch.multinomial(pa.view(-1, N_TYPES), 1, generator=gen).view(B, N)
        s0 = F.one_hot(b.ss, N_CL).float()
        prior = self.symm_prior_of(b.sg)[:, None]  # [B, 1, 15, 13]
        ps = ac[:, None, None, None] * s0 + (1 - ac[:, None, None, None]) * prior
        s_t = torch.multinomial(ps.view(-1, N_CL), 1, generator=gen).view(B, N, N_AX)
        fam = torch.tensor([family_index(int(g)) for g in b.sg.tolist()])
        p_k, p_x, l_a, l_s = self.run_net(t, b.sg, fam, ks_t, F.one_hot(a_t, N_TYPES).float(),
                                      F.one_hot(s_t, N_CL).float(), x_t, b.mask)
        m = b.mask
        loss_lattice = F.mse_loss(p_k, kmask * eps_k)
        tar_x = d_log_p_wrapped_normal(sig * eps_x, sig.expand_as(eps_x)) / s.sigmas_norm[t].sqrt()[:, None, None]
        loss_coord = ((p_x - tar_x) ** 2)[m].mean()
        loss_type = F.cross_entropy(l_a[m], b.z[m])
        loss_symm = F.cross_entropy(l_s[m].reshape(-1, N_CL), b.ss[m].reshape(-1))
        total = (cfg.cost_lattice * loss_lattice + cfg.cost_coord * loss_coord + cfg.cost_type * loss_type
                 + cfg.cost_symm * loss_symm)
        return {"loss": total, "loss_lattice": loss_lattice, "loss_coord": loss_coord, "loss_type": loss_type,
                "loss_symm": loss_symm}

    # ---- sampling
    def _posterior(self, z_t: torch.Tensor, p0: torch.Tensor, prior: torch.Tensor, t: int, s_: int | None = None
                   ) -> torch.Tensor:
        """p(z_s | z_t) = sum_x0 p(x0 | z_t) q(z_s | z_t, x0) with marginal transitions, s = s_ (default t - 1);
        the transition from s to t is Q_{t|s} = (ac_t / ac_s) I + (1 - ac_t / ac_s) 1 m^T. z_t one-hot [..., K],
        p0 [..., K], prior broadcastable [..., K]."""
        s = self.sched
        s_ = t - 1 if s_ is None else s_
        ac_t, ac_s = s.alphas_cumprod[t], s.alphas_cumprod[s_]
        a = s.alphas[t] if s_ == t - 1 else ac_t / ac_s
        # z_t Q_{t|s}^T: entry j = a [j == z_t] + (1 - a) m_{z_t}
        m_zt = (z_t * prior).sum(-1, keepdim=True)
        left = a * z_t + (1 - a) * m_zt  # [..., K] over z_s
        # x0 Q_s_bar: for each x0 (rows) over z_s (cols) = ac_s I + (1-ac_s) m
        # x0 Q_t_bar z_t^T = ac_t [x0 == z_t] + (1 - ac_t) m_{z_t}
        denom = ac_t * z_t + (1 - ac_t) * m_zt  # [..., K] over x0
        w = p0 / denom.clamp(min=1e-12)  # [..., K] over x0
        # sum_x0 w_x0 (ac_s [x0 == j] + (1 - ac_s) m_j) = ac_s w_j + (1 - ac_s) m_j sum(w)
        right = ac_s * w + (1 - ac_s) * prior * w.sum(-1, keepdim=True)
        out = left * right
        return out / out.sum(-1, keepdim=True).clamp(min=1e-30)

    def _lattice_step(self, k: torch.Tensor, eps_hat: torch.Tensor, t: int, s_: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of q(k_s | k_t, k0_hat), k0_hat = (k_t - sqrt(1 - ac_t) eps_hat) / sqrt(ac_t) clipped to the
        fitted range [ks_lo, ks_hi]."""
        sc = self.sched
        ac_t, ac_s = sc.alphas_cumprod[t], sc.alphas_cumprod[s_]
        k0 = (k - (1 - ac_t).sqrt() * eps_hat) / ac_t.sqrt()
        k0 = torch.maximum(torch.minimum(k0, self.ks_hi), self.ks_lo)
        a_ts = ac_t / ac_s  # the forward transition s -> t: k_t = sqrt(a_ts) k_s + sqrt(1 - a_ts) noise
        mean = (ac_s.sqrt() * (1 - a_ts) * k0 + a_ts.sqrt() * (1 - ac_s) * k) / (1 - ac_t)
        var = (1 - ac_s) / (1 - ac_t) * (1 - a_ts)
        return mean, var.clamp(min=0).sqrt()

    @torch.no_grad()
    def sample(self, sg: torch.Tensor, n_atoms: torch.Tensor, *, gen: torch.Generator, steps: int | None = None,
               step_lr: float = 1e-5, allowed_types: torch.Tensor | None = None, fixed_z: torch.Tensor | None = None,
               fixed_ss: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Reverse diffusion for crystals of groups sg [B] with n_atoms [B] asymmetric-unit atoms. steps: how many
        of the T timesteps to visit (None or >= T: all of them; fewer: strided ancestral sampling, see the module
        docstring), each visit one corrector and one predictor evaluation of the denoiser. allowed_types: optional
        bool [94] (composition hints: atom types restricted to these elements).

        Conditioning by inpainting (a fixed formula): fixed_z [B, N] long (atomic number, 0 = free) and fixed_ss
        [B, N, 15] long (class per axis, -1 = free) hold some atoms' types and site symmetries; at every step those
        entries are replaced by a draw of the forward process q(x_s | x_0) at the step's noise level (exact at s = 0),
        so the denoiser sees them as it saw data in training while the lattice, coordinates and free entries are
        denoised around them."""
        s, cfg = self.sched, self.cfg
        visit = timesteps_of(cfg.timesteps, steps)
        B, N = len(sg), int(n_atoms.max())
        mask = torch.arange(N)[None, :] < n_atoms[:, None]
        kmask, kadd = ks_masks(sg)
        fam = torch.tensor([family_index(int(g)) for g in sg.tolist()])
        tp = self.type_prior.clone()
        if allowed_types is not None:
            tp = tp * allowed_types.float()
            tp = tp / tp.sum()
        prior_s = self.symm_prior_of(sg)[:, None].expand(B, N, N_AX, N_CL)
        k = torch.randn(B, 6, generator=gen) * kmask + kadd
        x = torch.rand(B, N, 3, generator=gen)
        a = F.one_hot(torch.multinomial(tp.expand(B * N, -1), 1, generator=gen).view(B, N), N_TYPES).float()
        ss = F.one_hot(torch.multinomial(prior_s.reshape(-1, N_CL), 1, generator=gen).view(B, N, N_AX), N_CL).float()
        fz = fss = None
        if fixed_z is not None:
            fz = fixed_z[:, :N] > 0
            z0 = F.one_hot((fixed_z[:, :N] - 1).clamp(min=0), N_TYPES).float()
        if fixed_ss is not None:
            fss = fixed_ss[:, :N, 0] >= 0
            s0 = F.one_hot(fixed_ss[:, :N].clamp(min=0), N_CL).float()

        def inpaint(a: torch.Tensor, ss: torch.Tensor, t_: int) -> tuple[torch.Tensor, torch.Tensor]:
            ac_ = s.alphas_cumprod[t_]
            if fz is not None and bool(fz.any()):
                q = ac_ * z0 + (1 - ac_) * self.type_prior if t_ > 0 else z0
                draw = F.one_hot(torch.multinomial(q.reshape(-1, N_TYPES), 1, generator=gen).view(B, N), N_TYPES)
                a = torch.where(fz[..., None], draw.float(), a)
            if fss is not None and bool(fss.any()):
                q = ac_ * s0 + (1 - ac_) * prior_s if t_ > 0 else s0
                draw = F.one_hot(torch.multinomial(q.reshape(-1, N_CL), 1, generator=gen).view(B, N, N_AX), N_CL)
                ss = torch.where(fss[..., None, None], draw.float(), ss)
            return a, ss
        a, ss = inpaint(a, ss, visit[0])
        for j, t in enumerate(visit):
            s_ = visit[j + 1] if j + 1 < len(visit) else 0  # jump t -> s_
            last = s_ == 0
            tt = torch.full((B,), t, dtype=torch.long)
            sx, sn = s.sigmas[t], s.sigmas_norm[t]
            # corrector (Langevin on the coordinates)
            _, px, _, _ = self.run_net(tt, sg, fam, k, a, ss, x, mask)
            step = step_lr * (sx / cfg.sigma_begin) ** 2
            noise = torch.randn(B, N, 3, generator=gen) if not last else torch.zeros(B, N, 3)
            x = (x - step * px * sn.sqrt() + (2 * step).sqrt() * noise) % 1.0
            # predictor
            pk, px, la, ls = self.run_net(tt, sg, fam, k, a, ss, x, mask)
            mean, std = self._lattice_step(k, pk, t, s_)
            nk = torch.randn(B, 6, generator=gen) if not last else torch.zeros(B, 6)
            k = (mean + std * nk) * kmask + kadd
            k = k.clamp(-KS_BOUND, KS_BOUND)  # numerical guard only
            sa = s.sigmas[s_]
            step = sx ** 2 - sa ** 2
            std = (sa ** 2 * (sx ** 2 - sa ** 2) / sx ** 2).sqrt()
            noise = torch.randn(B, N, 3, generator=gen) if not last else torch.zeros(B, N, 3)
            x = (x - step * px * sn.sqrt() + std * noise) % 1.0
            p0a = F.softmax(la, -1)
            if allowed_types is not None:
                p0a = p0a * allowed_types.float()
                p0a = p0a / p0a.sum(-1, keepdim=True).clamp(min=1e-30)
            p0s = F.softmax(ls, -1)
            if not last:
                pa = self._posterior(a, p0a, tp, t, s_)
                ps = self._posterior(ss, p0s, prior_s, t, s_)
                a = F.one_hot(torch.multinomial(pa.reshape(-1, N_TYPES), 1, generator=gen).view(B, N), N_TYPES).float()
                ss = F.one_hot(torch.multinomial(ps.reshape(-1, N_CL), 1, generator=gen).view(B, N, N_AX), N_CL).float()
            else:
                a = F.one_hot(p0a.argmax(-1), N_TYPES).float()
                ss = F.one_hot(p0s.argmax(-1), N_CL).float()
            a, ss = inpaint(a, ss, s_)
        return {"ks": k, "x": x, "z": a.argmax(-1) + 1, "ss": ss, "mask": mask}

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.state_dict().items()}


def build(cfg: ModelConfig, seed: int = 0) -> SymmCD:
    torch.manual_seed(seed)
    return SymmCD(cfg)


def load(tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> SymmCD:
    m = SymmCD(ModelConfig.from_dict(config["model"]))
    tensors = dict(tensors)
    for name in ("ks_lo", "ks_hi"):  # versions registered before the lattice clip range existed: the wide default
        tensors.setdefault(name, getattr(m, name).clone())
    m.load_state_dict(tensors)
    m.eval()
    return m
